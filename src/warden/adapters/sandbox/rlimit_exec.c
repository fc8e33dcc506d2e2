/*
 * warden-rlimit-exec: sets rlimits, then execs a program. The live sandbox's supervisor starts
 * each command through it (supervisor.py), in place of util-linux's prlimit, which costs ~1 ms
 * more per command: prlimit is linked dynamically (the loader, libc, libsmartcols).
 *
 *   warden-rlimit-exec [RESOURCE=SOFT:HARD ...] -- PATH ARG0 [ARG ...]
 *
 * RESOURCE is an RLIMIT_* number, SOFT and HARD decimal (no "unlimited": the supervisor never
 * asks for it). PATH is the program as found on PATH by the supervisor; ARG0 the name the user
 * gave, which the program sees as its argv[0]. Anything else is refused (126) before anything
 * is set. A limit the kernel refuses: 126. An exec that fails: 127 when the program is not
 * there (ENOENT, ENOTDIR), else 126, as the supervisor's forked commands and prlimit say it.
 * A file the kernel cannot run (ENOEXEC) runs with /bin/sh, as execvp (bwrap's, prlimit's) does.
 *
 * No libc and no loader: the kernel maps it and jumps to _start. It reads no environment (the
 * command's passes through to execve untouched), so no variable can run code in it before the
 * limits are set, and it is installed readable by no one inside the sandbox, so the process
 * running it is not dumpable: no other process of the sandbox can write into its memory.
 *
 * Built by scripts/setup: cc -static -nostdlib -O2 ... (x86_64 and aarch64; any other
 * architecture fails the build, and Warden starts commands through prlimit instead).
 */

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "warden-rlimit-exec knows the system calls of x86_64 and aarch64 only"
#endif

typedef unsigned long u64;

#if defined(__x86_64__)
#define SYS_write 1
#define SYS_execve 59
#define SYS_exit_group 231
#define SYS_prlimit64 302

static long sys4(long n, long a, long b, long c, long d) {
    long ret;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return ret;
}

/* The kernel starts us with argc at the stack pointer: pass it to start(), the stack aligned. */
__asm__(".text\n"
        ".global _start\n"
        "_start:\n"
        "    xor %rbp, %rbp\n"
        "    mov %rsp, %rdi\n"
        "    and $-16, %rsp\n"
        "    call start\n"
        "    hlt\n");
#else
#define SYS_write 64
#define SYS_execve 221
#define SYS_exit_group 94
#define SYS_prlimit64 261

static long sys4(long n, long a, long b, long c, long d) {
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
    return x0;
}

__asm__(".text\n"
        ".global _start\n"
        "_start:\n"
        "    mov x29, #0\n"
        "    mov x30, #0\n"
        "    mov x0, sp\n"
        "    and sp, x0, #-16\n"
        "    b start\n");
#endif

#define NAME "warden-rlimit-exec: "
#define RLIMITS 16 /* RLIM_NLIMITS: resources 0..15 */
#define EPERM 1
#define ENOENT 2
#define E2BIG 7
#define ENOEXEC 8
#define ENOMEM 12
#define EACCES 13
#define ENOTDIR 20
#define EISDIR 21
#define EINVAL 22
#define ETXTBSY 26
#define ELOOP 40

struct rlimit64 {
    u64 soft;
    u64 hard;
};

static __attribute__((noreturn)) void leave(int status) {
    for (;;)
        sys4(SYS_exit_group, status, 0, 0, 0);
}

/* One line on fd 2 of NAME and up to four parts, in one write where it fits (a command's
   stderr may be shared with others). */
static void say(const char *a, const char *b, const char *c, const char *d) {
    char line[1024];
    u64 used = 0;
    const char *parts[5] = {NAME, a, b, c, d};
    for (int p = 0; p < 5; p++)
        for (const char *s = parts[p]; *s && used < sizeof(line) - 1; s++)
            line[used++] = *s;
    line[used++] = '\n';
    for (u64 done = 0; done < used;) {
        long wrote = sys4(SYS_write, 2, (long)(line + done), (long)(used - done), 0);
        if (wrote <= 0)
            return;
        done += (u64)wrote;
    }
}

/* A decimal number at *text, ended by `end` (a NUL, or a character then skipped), without overflow. */
static int number(const char **text, char end, u64 *value) {
    const char *s = *text;
    u64 n = 0;
    if (*s < '0' || *s > '9')
        return 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        u64 digit = (u64)(*s - '0');
        if (n > (~0UL - digit) / 10)
            return 0;
        n = n * 10 + digit;
    }
    if (*s != end)
        return 0;
    *value = n;
    *text = end ? s + 1 : s;
    return 1;
}

/* The C library's text for the errnos an exec or a setrlimit commonly fails with, else "errno N". */
static const char *reason(long error, char *buffer, u64 size) {
    switch (error) {
    case EPERM: return "Operation not permitted";
    case ENOENT: return "No such file or directory";
    case EACCES: return "Permission denied";
    case ENOEXEC: return "Exec format error";
    case E2BIG: return "Argument list too long";
    case ENOTDIR: return "Not a directory";
    case EISDIR: return "Is a directory";
    case EINVAL: return "Invalid argument";
    case ETXTBSY: return "Text file busy";
    case ELOOP: return "Too many levels of symbolic links";
    case ENOMEM: return "Cannot allocate memory";
    default: break;
    }
    char *d = buffer + size - 1;
    u64 n = (u64)error;
    *d = 0;
    do {
        *--d = (char)('0' + n % 10);
        n /= 10;
    } while (n && d > buffer + 6);
    for (int i = 5; i >= 0; i--)
        *--d = "errno "[i];
    return d;
}

static __attribute__((noreturn)) void refuse(const char *why, const char *what) {
    say(why, what, "", "");
    leave(126);
}

static int is_separator(const char *arg) {
    return arg[0] == '-' && arg[1] == '-' && arg[2] == 0;
}

__attribute__((used, noreturn)) void start(long *stack) {
    long argc = stack[0];
    char **argv = (char **)(stack + 1);
    char **envp = argv + argc + 1;
    struct rlimit64 limits[RLIMITS];
    const char *given[RLIMITS];
    unsigned seen = 0;
    char buffer[32];
    long at = 1;
    /* All of them parsed before any is set: a malformed request changes nothing. */
    for (; at < argc && !is_separator(argv[at]); at++) {
        const char *s = argv[at];
        u64 which, soft, hard;
        if (!number(&s, '=', &which) || which >= RLIMITS || !number(&s, ':', &soft) || !number(&s, 0, &hard))
            refuse("not RESOURCE=SOFT:HARD: ", argv[at]);
        if (soft > hard)
            refuse("a soft limit above its hard one: ", argv[at]);
        if (seen & (1u << which))
            refuse("a resource given twice: ", argv[at]);
        seen |= 1u << which;
        limits[which].soft = soft;
        limits[which].hard = hard;
        given[which] = argv[at];
    }
    if (at + 2 >= argc) /* no "--", or no PATH and ARG0 after it */
        refuse("usage: warden-rlimit-exec [RESOURCE=SOFT:HARD ...] -- PATH ARG0 [ARG ...]", "");
    char *path = argv[at + 1];
    char **args = argv + at + 2;
    for (unsigned which = 0; which < RLIMITS; which++) {
        if (!(seen & (1u << which)))
            continue;
        long failed = sys4(SYS_prlimit64, 0, (long)which, (long)&limits[which], 0);
        if (failed < 0) {
            say("could not set ", given[which], ": ", reason(-failed, buffer, sizeof(buffer)));
            leave(126);
        }
    }
    long error = -sys4(SYS_execve, (long)path, (long)args, (long)envp, 0);
    if (error == ENOEXEC) {
        /* Neither a binary nor a #! script: a shell script without its first line, which execvp
           (bwrap's, prlimit's) runs with /bin/sh: the shell's name first, then the file's path. */
        long count = argc - (at + 2);
        char *shell[count + 2];
        shell[0] = "/bin/sh";
        shell[1] = path;
        for (long i = 1; i <= count; i++) /* up to the NULL that ends argv */
            shell[i + 1] = args[i];
        sys4(SYS_execve, (long)"/bin/sh", (long)shell, (long)envp, 0);
    }
    /* Worded as prlimit words it (Warden explains it: core/runs.py), naming the program as given. */
    say("failed to execute ", args[0], ": ", reason(error, buffer, sizeof(buffer)));
    leave(error == ENOENT || error == ENOTDIR ? 127 : 126);
}
