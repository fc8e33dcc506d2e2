"""Sandbox backends: bubblewrap runner, seccomp filter, cgroups, network proxy, doctor probes."""
