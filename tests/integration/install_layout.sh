#!/usr/bin/env bash
# Installed like a daemon: `crier --version` names the version CMake gave and
# the embedded schema; `cmake --install` puts the binary, the Lua library, the
# example rules and the docs in the GNU places, and the installed binary finds
# its library beside itself (BINDIR/../share/crier) — never in the source tree,
# which only a binary in its build directory uses; --help says which one is
# used. `crier serve` without rules refuses and says how to give them.
. "$(dirname "$0")/../support/lib.sh"
BUILD=$(dirname "$CRIER_BIN")

note "crier --version"
version=$(sed -n 's/^project(crier VERSION \([0-9.]*\) .*/\1/p' "$CRIER_SOURCE_DIR/CMakeLists.txt")
[ -n "$version" ] || fail "no VERSION in CMakeLists.txt's project()"
latest=$(cd "$CRIER_SOURCE_DIR/sql" && ls [0-9]*.sql | sort | tail -1)
out=$("$CRIER_BIN" --version) || fail "crier --version: $out"
grep -qx "crier $version" <<<"$out" || fail "--version names $version: $out"
grep -q "migrations up to $latest, .* function files; sql checksum [0-9a-f]\{12\}$" <<<"$out" ||
    fail "--version names the latest migration and the SQL's checksum: $out"
grep -qF "Lua library $CRIER_SOURCE_DIR/lua (the source tree: this binary runs from its build directory)" <<<"$out" ||
    fail "the build tree's binary uses the source tree: $out"

note "cmake --install into a prefix"
PREFIX="$WORK/prefix"
cmake --install "$BUILD" --prefix "$PREFIX" >"$WORK/install.log" || fail "cmake --install: $(tail "$WORK/install.log")"
for f in bin/crier share/crier/lua/crier/init.lua share/crier/lua/crier/runtime.lua \
    share/crier/examples/rules/billing.lua share/crier/examples/crier.conf.lua \
    share/doc/crier/README.md share/doc/crier/LICENSE share/doc/crier/docs/RULES.md; do
    [ -e "$PREFIX/$f" ] || fail "cmake --install did not install $f: $(find "$PREFIX" | head -40)"
done

note "the installed binary uses the installed library, and says so"
out=$("$PREFIX/bin/crier" --version)
grep -qF "Lua library $PREFIX/share/crier/lua (installed with this binary" <<<"$out" ||
    fail "the installed binary's library: $out"
out=$("$PREFIX/bin/crier" check --help)
grep -qF "this crier's Lua library: $PREFIX/share/crier/lua (installed with this binary" <<<"$out" ||
    fail "--help names the installed library: $out"
grep -qF "the bundled example rules: $PREFIX/share/crier/examples/rules" <<<"$out" ||
    fail "--help names the installed example rules: $out"
out=$("$PREFIX/bin/crier" check) || fail "check of the installed examples: $out"
grep -qF "$PREFIX/share/crier/examples/rules: ok" <<<"$out" || fail "check uses the installed examples: $out"
# the installed files are what is used: a broken installed library breaks it
mv "$PREFIX/share/crier/lua/crier/runtime.lua" "$WORK/runtime.lua"
if out=$("$PREFIX/bin/crier" check 2>&1); then fail "check passed without the installed runtime.lua: $out"; fi
mv "$WORK/runtime.lua" "$PREFIX/share/crier/lua/crier/runtime.lua"

note "a binary outside its build directory, with nothing installed beside it"
mkdir -p "$WORK/elsewhere/bin"
cp "$CRIER_BIN" "$WORK/elsewhere/bin/crier"
if out=$("$WORK/elsewhere/bin/crier" check 2>&1); then fail "a lone binary found a Lua library: $out"; fi
grep -qF "cannot find crier's Lua library: it belongs at $WORK/elsewhere/share/crier/lua, beside the binary" <<<"$out" ||
    fail "a lone binary says where its library belongs: $out"
grep -q "give --lua-dir DIR or CRIER_LUA_DIR" <<<"$out" || fail "and the way out: $out"
out=$("$WORK/elsewhere/bin/crier" check --lua-dir "$PREFIX/share/crier/lua" "$PREFIX/share/crier/examples/rules") ||
    fail "--lua-dir: $out"

note "serve needs rules"
new_db
if out=$("$PREFIX/bin/crier" serve --exit-when-idle 2>&1); then fail "serve ran without rules: $out"; fi
grep -q "which rules? give the directory of your rules: --rules DIR (or CRIER_RULES=DIR" <<<"$out" ||
    fail "serve says how to give rules: $out"
grep -qF "To run the bundled example rules: --rules $PREFIX/share/crier/examples/rules" <<<"$out" ||
    fail "serve names the bundled examples: $out"
grep -q "engine: running" <<<"$out" && fail "serve ran the examples"
CRIER_RULES="$PREFIX/share/crier/examples/rules" "$PREFIX/bin/crier" serve --exit-when-idle \
    --set billing_webhook_url=http://127.0.0.1:9/ >"$WORK/serve.log" 2>&1 ||
    fail "serve with CRIER_RULES: $(tail -5 "$WORK/serve.log")"
echo "ok"
