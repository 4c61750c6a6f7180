"""From what this machine measures to what a cluster will do: each library's all-reduce measured (commbench) and a
projection of a sweep's step time to N nodes on a link of a given rate (project)."""
