"""Planning a cluster from what this machine measures: each library's all-reduce measured (`run.py commbench`:
commbench.py, worker.py, bandwidth.py, commbench_report.py) and a projection of a sweep's step time to N nodes on a
link of a given rate (`run.py project`: project.py; its inputs reference.py, profile.py, links.py; the model
timeline.py, projection.py; its output projection_report.py)."""
