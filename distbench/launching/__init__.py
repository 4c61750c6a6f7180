"""Starting processes: the launchers and their command lines (launch), each backend's launch commands as its
registry entry names them (commands), simulated nodes on one host (topology), a shaped link between them (link),
and each process's cores (affinity). What a launcher tells its processes is the core's (distbench/process.py). No
distributed library is imported here."""
