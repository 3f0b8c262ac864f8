#!/usr/bin/env bash
# The commands of the README's and the guides' ```sh blocks, run as written by
# scripts/doc-test against a fresh database and real local processes (crier
# serve, the HTTP API, webhook receivers, busted): a documented command that
# fails, or whose output no longer looks like what the doc shows, fails this
# test with its file, line and output. The skipped ones are listed, with
# reasons, in scripts/doc-test.
. "$(dirname "$0")/../support/lib.sh"
new_db
# A reader's shell: webhooks to loopback are refused unless a command allows it.
unset CRIER_ALLOW_TARGETS
/usr/bin/python3 "$CRIER_SOURCE_DIR/scripts/doc-test" --bin "$CRIER_BIN" --work "$WORK"
