/* http_handlers_prefs.c — a person's stored preferences (opt-outs per event
 * type and channel) and settings (time zone, locale, quiet hours) over HTTP:
 * read as one document, changed by one PATCH that applies all it gives or
 * nothing (the router's transaction; the SQL functions check every entry).
 * Who may act for whom is the feed's rule (crier_http_person): a user token
 * its own person, an API key any person of its tenant named by ?user=.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_handlers.h"

#include "http_auth.h"
#include "http_query.h"

/* Answers the document of crier.api_preferences for the first row of res
 * (one JSON value), and clears res. */
static int prefs_reply(crier_http_request *r, PGresult *res)
{
    if (!res)
        return -1;
    crier_http_reply(r, 200, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0));
    PQclear(res);
    return 0;
}

int crier_http_preferences_get(crier_http_request *r)
{
    const char *user;
    if (crier_http_person(r, "read its own user's preferences", &user) < 0)
        return -1;
    const char *values[1] = {user};
    return prefs_reply(
        r, crier_http_query_tenant(r, "SELECT crier.api_preferences($1, $2)", 1, values));
}

int crier_http_preferences_update(crier_http_request *r)
{
    static const char *const names[] = {"preferences", "settings"};
    crier_http_field f[2];
    const char *user;

    if (crier_http_person(r, "change its own user's preferences", &user) < 0 ||
        crier_http_body_fields(r, names, 2, f, false) < 0)
        return -1;
    /* the fields' JSON text as it came (a null one is absent: left as it is) */
    const char *values[3] = {user, f[0].value, f[1].value};
    return prefs_reply(
        r, crier_http_query_tenant(
               r, "SELECT crier.api_set_preferences($1, $2, $3::jsonb, $4::jsonb)", 3, values));
}
