/* test_wake.c — when the awake daemon counts as under load (wake.h): from
 * --linger-rate events/s, and, once lingering, until the rate falls below half
 * of it, so a rate that dips just under the threshold does not send it back to
 * probing every --awake-poll. */
#include "check.h"
#include "wake.h"

int main(void)
{
    /* not lingering: only the full rate starts it */
    CHECK(!crier_wake_under_load(false, 0, 2000));
    CHECK(!crier_wake_under_load(false, 1999.9, 2000));
    CHECK(crier_wake_under_load(false, 2000, 2000));
    CHECK(crier_wake_under_load(false, 50000, 2000));
    /* lingering: stays down to half the rate */
    CHECK(crier_wake_under_load(true, 1999.9, 2000));
    CHECK(crier_wake_under_load(true, 1000, 2000));
    CHECK(!crier_wake_under_load(true, 999.9, 2000));
    CHECK(!crier_wake_under_load(true, 0, 2000));
    /* another --linger-rate */
    CHECK(crier_wake_under_load(false, 300, 300));
    CHECK(crier_wake_under_load(true, 150, 300));
    CHECK(!crier_wake_under_load(true, 149, 300));
    return CHECK_DONE();
}
