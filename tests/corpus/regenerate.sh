#!/usr/bin/env bash
# Remake the corpus of real run folders (tests/corpus/runs/, listed in tests/corpus/corpus.json): every role,
# or the roles named, e.g. `tests/corpus/regenerate.sh pytorch-standard`. Needs the kit's .venv and the three
# framework stacks (`make setup`); run from anywhere. See tests/corpus/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/python tests/corpus/regenerate.py "$@"
