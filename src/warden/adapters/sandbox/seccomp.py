"""A seccomp BPF filter for the sandbox, compiled with libseccomp through ctypes.

Why ctypes and not a binding from PyPI: the run path imports only the standard library, so
the runner also works from a plain system interpreter. The filter is the default-allow
kind (as Codex CLI and Flatpak use): it denies the syscalls that widen the kernel surface
without being needed by build tools, and the 32-bit ABIs (i386 via `int 0x80`, x32), whose
syscall numbers would slip past a filter written for the native ABI.
"""

from __future__ import annotations

import ctypes
import errno
import os
from functools import cache

__all__ = ["DENIED_SYSCALLS", "SeccompUnavailable", "filter_bpf", "libseccomp_version"]

# Each denied with EPERM (not a kill), so programs that probe for them fall back politely.
DENIED_SYSCALLS = (
    "io_uring_setup", "io_uring_enter", "io_uring_register",  # bypasses seccomp, many CVEs
    "ptrace", "process_vm_readv", "process_vm_writev",          # reading other processes
    "bpf", "userfaultfd", "perf_event_open",                    # kernel exploit primitives
    "keyctl", "add_key", "request_key",                         # keyrings are not namespaced
    "kexec_load", "kexec_file_load",
    "open_by_handle_at", "name_to_handle_at",                   # "shocker" container escapes
)
# New user namespaces hand a process every capability over fresh namespaces, the widest
# kernel surface there is; bwrap's --disable-userns stops them, but older bwraps lack it,
# so the filter refuses them too. clone3 passes its flags in memory, which seccomp cannot
# read: it answers ENOSYS, and libc falls back to clone, whose flags it can.
_CLONE_NEWUSER = 0x10000000
# ioctl requests that inject input into a terminal (CVE-2017-5226 for TIOCSTI).
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C
# fallocate(2) with FALLOC_FL_KEEP_SIZE allocates blocks past a file's length, which
# RLIMIT_FSIZE does not bound (the size does not change): one call could take the whole disk
# before the quota watcher sees it. Refused as "not supported", so posix_fallocate and the like
# fall back to writing (which the file-size limit does bound).
_FALLOC_FL_KEEP_SIZE = 0x01

_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_ACT_KILL_PROCESS = 0x80000000
_SCMP_FLTATR_ACT_BADARCH = 2
_SCMP_CMP_MASKED_EQ = 7


def _act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class SeccompUnavailable(RuntimeError):
    """libseccomp is missing or refused the filter."""


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


@cache
def _lib() -> ctypes.CDLL:
    # The soname first: find_library runs `ldconfig -p` (~25 ms, on every `warden run`).
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError:
        from ctypes.util import find_library  # ~16 ms of imports: only where the soname differs

        name = find_library("seccomp")
        try:
            lib = ctypes.CDLL(name or "libseccomp.so", use_errno=True)
        except OSError as exc:
            raise SeccompUnavailable(f"libseccomp not found ({exc}): apt-get install libseccomp2") from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def libseccomp_version() -> str | None:
    """The loaded libseccomp's version, or None when it is missing."""
    try:
        lib = _lib()
    except SeccompUnavailable:
        return None

    class _Version(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]

    lib.seccomp_version.restype = ctypes.POINTER(_Version)
    v = lib.seccomp_version().contents
    return f"{v.major}.{v.minor}.{v.micro}"


@cache
def filter_bpf() -> bytes:
    """The compiled BPF program, ready for `bwrap --seccomp FD` (built once per process)."""
    lib = _lib()
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise SeccompUnavailable("seccomp_init failed")
    try:
        # A syscall made through another ABI than the filter's (i386, x32) kills the process;
        # the filter holds only the native architecture.
        _check(lib.seccomp_attr_set(ctx, _SCMP_FLTATR_ACT_BADARCH, _SCMP_ACT_KILL_PROCESS), "attr")
        for name in DENIED_SYSCALLS:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:  # not on this architecture
                continue
            _check(lib.seccomp_rule_add_array(ctx, _act_errno(errno.EPERM), nr, 0, None), name)
        clone3 = lib.seccomp_syscall_resolve_name(b"clone3")
        if clone3 >= 0:
            _check(lib.seccomp_rule_add_array(ctx, _act_errno(errno.ENOSYS), clone3, 0, None), "clone3")
        newuser = _ArgCmp(0, _SCMP_CMP_MASKED_EQ, _CLONE_NEWUSER, _CLONE_NEWUSER)
        # clone's flags are its first argument on x86-64 and most others (s390 swaps them).
        for name in ("unshare", "clone"):
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            _check(lib.seccomp_rule_add_array(ctx, _act_errno(errno.EPERM), nr, 1, ctypes.byref(newuser)), name)
        ioctl = lib.seccomp_syscall_resolve_name(b"ioctl")
        for request in (_TIOCSTI, _TIOCLINUX):
            # Compare only the low 32 bits: the kernel ignores the high half of the request,
            # and an unmasked compare is bypassed by setting it (CVE-2019-10063).
            cmp = _ArgCmp(1, _SCMP_CMP_MASKED_EQ, 0xFFFFFFFF, request)
            _check(lib.seccomp_rule_add_array(ctx, _act_errno(errno.EPERM), ioctl, 1,
                                              ctypes.byref(cmp)), "ioctl")
        fallocate = lib.seccomp_syscall_resolve_name(b"fallocate")
        if fallocate >= 0:
            keep_size = _ArgCmp(1, _SCMP_CMP_MASKED_EQ, _FALLOC_FL_KEEP_SIZE, _FALLOC_FL_KEEP_SIZE)
            _check(lib.seccomp_rule_add_array(ctx, _act_errno(errno.EOPNOTSUPP), fallocate, 1,
                                              ctypes.byref(keep_size)), "fallocate")
        read_fd, write_fd = os.pipe()
        try:
            _check(lib.seccomp_export_bpf(ctx, write_fd), "export")
            os.close(write_fd)
            write_fd = -1
            chunks = []
            while chunk := os.read(read_fd, 65536):
                chunks.append(chunk)
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)
        return b"".join(chunks)
    finally:
        lib.seccomp_release(ctx)


def _check(rc: int, what: str) -> None:
    if rc < 0:
        raise SeccompUnavailable(f"libseccomp failed at {what}: {os.strerror(-rc)}")
