"""Sweeps: what a configuration is (configuration), the plan of configurations and rounds (plan), the executors that
start one configuration's processes and collect its record (executor), running the rounds (runner), and the report
of the records (report, stats); check-task (checktask) is a small sweep of its own."""
