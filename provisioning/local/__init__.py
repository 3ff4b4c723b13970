"""The local backend: each instance a process group on the server's machine."""
