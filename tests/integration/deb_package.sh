#!/usr/bin/env bash
# The .deb: built with `cpack -G DEB` from the build tree ctest already built
# (no rebuild), it holds the binary, the Lua library, the example rules, the
# docs and the systemd unit in /usr with Debian 12's package names as
# dependencies; `dpkg -i` installs it on this machine, `crier demo` runs from
# the installed paths (/usr/bin/crier, /usr/share/crier), the installed unit
# passes systemd-analyze verify, and `dpkg -r` removes it all again — also
# when the test fails. Needs root and dpkg (CI: a fresh Debian 12 as root);
# elsewhere, or when a crier is installed already, it is skipped (77).
. "$(dirname "$0")/../support/lib.sh"
BUILD=$(dirname "$CRIER_BIN")

if [ "$(id -u)" != 0 ] || ! command -v dpkg >/dev/null || ! command -v cpack >/dev/null; then
    echo "SKIP: installing a .deb needs root, dpkg and cpack"
    exit 77
fi
if dpkg -s crier >/dev/null 2>&1 || [ -e /usr/bin/crier ]; then
    echo "SKIP: a crier is installed on this machine already; this test installs and removes its own"
    exit 77
fi

# dpkg_locked CMD…: runs dpkg, waiting (up to 2 min) while another dpkg or
# apt holds the lock; fails with dpkg's output otherwise.
dpkg_locked() {
    local out
    for _ in $(seq 120); do
        if out=$(dpkg "$@" 2>&1); then
            return 0
        fi
        grep -q "lock" <<<"$out" || { echo "$out" >&2; return 1; }
        sleep 1
    done
    echo "$out" >&2
    return 1
}

INSTALLED=false
remove_package() {
    if $INSTALLED; then
        dpkg_locked -r crier >"$WORK/remove.log" 2>&1 || echo "could not remove the crier package: $(cat "$WORK/remove.log")" >&2
    fi
    cleanup
}
trap remove_package EXIT

note "cpack -G DEB from the build directory"
start=$(date +%s)
(cd "$BUILD" && cpack -G DEB -B "$WORK/pkg") >"$WORK/cpack.log" 2>&1 || fail "cpack: $(tail "$WORK/cpack.log")"
deb=$(ls "$WORK"/pkg/crier_*_*.deb)
[ -f "$deb" ] || fail "no crier_VERSION_ARCH.deb: $(ls "$WORK/pkg")"
note "built $(basename "$deb") in $(($(date +%s) - start)) s"
info=$(dpkg-deb -I "$deb")
grep -qx " Depends: libc6, libcurl4, libev4, libluajit2-5.1-2, libmicrohttpd12, libpq5, librdkafka1, libssl3" <<<"$info" ||
    fail "Depends names Debian's packages: $info"
grep -qx " Recommends: postgresql" <<<"$info" || fail "Recommends postgresql (the embedded default): $info"
dpkg-deb -c "$deb" | awk '{print $6}' >"$WORK/contents"
for f in ./usr/bin/crier ./usr/share/crier/lua/crier/init.lua ./usr/share/crier/examples/rules/billing.lua \
    ./usr/share/doc/crier/LICENSE ./usr/share/doc/crier/docs/OPERATIONS.md ./usr/lib/systemd/system/crier.service; do
    grep -qx "$f" "$WORK/contents" || fail "the package lacks $f: $(cat "$WORK/contents")"
done
grep -q "^./usr/local\|^./work\|^./tmp" "$WORK/contents" && fail "the package holds files outside /usr's layout"

note "dpkg -i"
INSTALLED=true
dpkg_locked -i "$deb" || fail "dpkg -i failed"
dpkg -s crier | grep -qx "Status: install ok installed" || fail "not installed: $(dpkg -s crier)"

note "crier from the installed paths"
cd "$WORK" # not the source tree
out=$(env -u CRIER_LUA_DIR -u CRIER_RULES /usr/bin/crier --version) || fail "crier --version: $out"
grep -qF "Lua library /usr/share/crier/lua (installed with this binary" <<<"$out" || fail "--version: $out"
out=$(env -u CRIER_LUA_DIR -u CRIER_RULES -u CRIER_DATABASE_URL /usr/bin/crier demo --data-dir "$WORK/pg" 2>"$WORK/demo.log") ||
    fail "the installed crier demo failed: $out $(tail "$WORK/demo.log")"
grep -qF "rules: /usr/share/crier/examples/rules (Lua library /usr/share/crier/lua)" <<<"$out" ||
    fail "the demo runs the installed rules and library: $out"
grep -q "result: one alert per person per invoice" <<<"$out" || fail "the demo's result: $out"
[ ! -e "$WORK/pg/postmaster.pid" ] || fail "the demo left PostgreSQL running"
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify /usr/lib/systemd/system/crier.service >"$WORK/verify.log" 2>&1 ||
        fail "systemd-analyze verify: $(cat "$WORK/verify.log")"
    ! grep -q "crier.service" "$WORK/verify.log" || fail "the unit has problems: $(cat "$WORK/verify.log")"
    grep -qx "ExecStart=/usr/bin/crier serve" /usr/lib/systemd/system/crier.service || fail "the unit runs /usr/bin/crier"
fi

note "dpkg -r"
dpkg_locked -r crier || fail "dpkg -r failed"
INSTALLED=false
[ ! -e /usr/bin/crier ] || fail "dpkg -r left /usr/bin/crier"
[ ! -e /usr/share/crier ] || fail "dpkg -r left /usr/share/crier"
[ ! -e /usr/lib/systemd/system/crier.service ] || fail "dpkg -r left the unit"
echo "ok"
