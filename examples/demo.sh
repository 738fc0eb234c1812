#!/usr/bin/env bash
# A tour of stargraph-mem in a scratch database: store episodes, read them back,
# check and compile the shipped rule pack, consolidate, and explain a fact.
set -euo pipefail
cd "$(dirname "$0")/.."
SM=${SM:-stargraph-mem}
DB=$(mktemp -d)/demo.db

echo "== put three episodes"
$SM put --db "$DB" --user alice --session s1 --agent rag --id ep1 \
  --timestamp 2026-11-01T09:00:00+00:00 \
  --meta subject=alice --meta predicate=likes --meta object=tea "Alice likes tea"
$SM put --db "$DB" --user alice --session s1 --agent rag --id ep2 \
  --timestamp 2026-11-01T09:05:00+01:00 "A plain note without structure"
$SM put --db "$DB" --user alice --session s2 --agent rag --id ep3 \
  --timestamp 2026-11-02T10:00:00+00:00 \
  --meta subject=alice --meta predicate=likes --meta object=coffee "Alice now prefers coffee"

echo "== recent episodes of alice (newest first)"
$SM recent --db "$DB" --user alice

echo "== the shipped default pack"
$SM validate rules/default.yaml
$SM info rules/default.yaml

echo "== consolidate with the default pack (pass time fixed for reproducibility)"
$SM consolidate --db "$DB" --pack rules/default.yaml --now 2026-11-03T03:00:00+00:00

echo "== current facts"
$SM facts --db "$DB"

echo "== the schedule: each rule's cadence, pending episodes, last and next run"
$SM status --db "$DB" --now 2026-11-03T03:00:00+00:00

echo "== why the first fact exists: rule, reason, sources and the fact it replaced"
FACT=$($SM facts --db "$DB" --json | python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[0])["id"])')
$SM explain --db "$DB" "$FACT"
