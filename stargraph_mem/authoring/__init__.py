"""Rule-pack authoring tools: pack tests, coverage, traces, replay diffs and lint."""
