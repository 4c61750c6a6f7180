"""A cluster emulated on one machine (issue 38): a task's step measured module by module (profile.py), for an
emulator to replay."""
