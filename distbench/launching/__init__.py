"""Starting processes: the launchers and what each tells its processes (launch), simulated nodes on one host
(topology), a shaped link between them (link), and each process's cores (affinity). No distributed library is
imported here."""
