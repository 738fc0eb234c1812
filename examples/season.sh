#!/usr/bin/env bash
# A season as a user runs it: the episodes of examples/season.py (50 users, 30 nights after
# an imported history), each night ingested, then consolidated by the three specification
# packs, each into its own memory (dream_cycle.db, graph_memory.db, engram.db) under DIR.
#   bash examples/season.sh DIR   (SQLite files; for PostgreSQL schemas:
#   DB_PREFIX="postgresql://host/db?schema=season_" DB_SUFFIX="" bash examples/season.sh DIR)
set -euo pipefail
dir=${1:?usage: season.sh DIR}
cd "$(dirname "$0")/.."
python examples/season.py --users "${USERS:-50}" --nights "${NIGHTS:-30}" --out "$dir/episodes" > "$dir/nights.txt"
for pack in dream_cycle graph_memory engram; do
  db="${DB_PREFIX:-$dir/}$pack${DB_SUFFIX-.db}"
  while read -r file at count; do
    stargraph-mem ingest "$dir/episodes/$file" --db "$db" > /dev/null
    stargraph-mem consolidate --db "$db" --pack "rules/$pack.yaml" --now "$at" > "$dir/$pack-${file%.jsonl}.log"
  done < "$dir/nights.txt"
  echo "$pack: $(stargraph-mem facts --db "$db" --json | wc -l) current facts"
done
