/*
 * The `warden` program, native: the thin client of the home's daemon for `warden run`, and for
 * everything else Warden's Python CLI, exec'd in its place.
 *
 * Why: a `warden run` through the daemon (interfaces/cli/daemon.py) spends ~30 ms in the daemon
 * and, with the Python client (interfaces/cli/entry.py), another 20-35 ms starting Python before
 * it even connects. This program is entry.py's main() for the one case it speeds up, in C, as
 * Nailgun's `ng` and `emacsclient` are for theirs: it sends the daemon byte for byte the request
 * entry.py sends (read entry.py for why each check is made) and takes the same answers.
 *
 * Whatever it does not take exactly as entry.py would (another command, a terminal on stdin,
 * no daemon yet, a home given as `~user`, an answer other than `pid N`...) it leaves to Python,
 * by exec of `<this program's folder>/python` running entry.py's main() on the same command line
 * and environment (which starts the daemon where there is none). A wrong guess here costs only
 * that exec, never a wrong run: the daemon checks the home and the client again, and its child
 * parses the command line with the CLI's own parser. Nothing has started until the daemon's
 * child says its pid.
 *
 * Built by scripts/build-warden-client; scripts/setup installs it as .venv/bin/warden.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <langinfo.h>
#include <limits.h>
#include <locale.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* the same number on every architecture (Linux 5.3) */
#endif

/* entry.py's constants: change them together. */
#define MAX_FRAME (1u << 20)
#define CONNECT_S 2     /* seconds to reach the daemon and hand it the request */
#define ANSWER_MS 10000 /* for its child to say it runs the command, else Python runs it */
#define MAGIC "warden-run/3"

extern char **environ;

static char **args; /* the command line after the program's name */
static int nargs;

/* ---- Python, for everything this program does not do itself ------------------------------- */

/* Exec Warden's Python CLI with this command line and environment, untouched: entry.py's main(),
 * as the console script calls it (`python -m warden` is the same but imports runpy first, ~9 ms
 * of every command here). -P: no current folder on the import path (a bot's `selectors.py` in a
 * workspace must never load). Every descriptor this program opened is close-on-exec: none
 * reaches Python. */
static _Noreturn void python(void)
{
    static char path[PATH_MAX];
    /* This program's own file (symlinks resolved): the venv's bin, where its python is. */
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - sizeof "python");
    char *slash = n > 0 ? memrchr(path, '/', (size_t)n) : NULL;
    char **argv = calloc((size_t)nargs + 5, sizeof *argv);
    static char entry_main[] = "from warden.interfaces.cli.entry import main; main()";
    if (slash == NULL || argv == NULL) {
        fputs("warden: cannot find its Python (/proc/self/exe unreadable)\n", stderr);
        _exit(127);
    }
    strcpy(slash + 1, "python");
    argv[0] = path, argv[1] = "-P", argv[2] = "-c", argv[3] = entry_main;
    memcpy(argv + 4, args, (size_t)nargs * sizeof *args);
    /* Ctrl-C held across the exec (a mask survives it) until entry.py's main() takes it as
     * "interrupted": one that came while Python started (its site, its first imports) ended it
     * with a traceback or "Fatal Python error: init_import_site". */
    sigset_t interrupt;
    sigemptyset(&interrupt);
    sigaddset(&interrupt, SIGINT);
    sigprocmask(SIG_BLOCK, &interrupt, NULL);
    execv(path, argv);
    sigprocmask(SIG_UNBLOCK, &interrupt, NULL);
    fprintf(stderr, "warden: cannot start %s: %s\n", path, strerror(errno));
    _exit(127);
}

/* ---- what entry.py looks at before it connects -------------------------------------------- */

/* A closed stdin, stdout or stderr (`warden run ... >&-`) becomes /dev/null (entry.py's
 * _standard_streams): the daemon's child and Python both write to them. */
static void standard_streams(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF)
            continue;
        int null = open("/dev/null", O_RDWR);
        if (null >= 0 && null != fd) {
            dup2(null, fd);
            close(null);
        }
    }
}

/* How many words of the command line are Warden's own: those before the first `--`. */
static int own_words(void)
{
    for (int i = 0; i < nargs; i++)
        if (strcmp(args[i], "--") == 0)
            return i;
    return nargs;
}

/* entry.py's is_daemon_run: `run`, without a terminal or help. */
static int is_daemon_run(void)
{
    int own = own_words();
    const char *first = NULL;
    for (int i = 0; i < own; i++) {
        const char *w = args[i];
        if (!strcmp(w, "--tty") || !strcmp(w, "-t") || !strcmp(w, "--help") || !strcmp(w, "-h"))
            return 0;
        if (first == NULL && w[0] != '-' && (i == 0 || strcmp(args[i - 1], "--home") != 0))
            first = w;
    }
    return first != NULL && strcmp(first, "run") == 0;
}

/* entry.py's _wanted: may this command line go through the daemon? */
static int wanted(void)
{
    const char *daemon = getenv("WARDEN_DAEMON");
    if (daemon && (!strcmp(daemon, "0") || !strcmp(daemon, "off") || !strcmp(daemon, "no") ||
                   !strcmp(daemon, "false")))
        return 0;
    /* A terminal on stdin: Ctrl-C there must reach the program, as in a run alone. */
    return is_daemon_run() && !isatty(0);
}

/* posixpath.join(a, b) into out (size bytes); 0 when it does not fit. */
static int join(char *out, size_t size, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (b[0] == '/')
        la = 0;
    int slash = la > 0 && a[la - 1] != '/';
    if (la + (size_t)slash + lb >= size)
        return 0;
    memmove(out + la + (size_t)slash, b, lb + 1);
    memmove(out, a, la);
    if (slash)
        out[la] = '/';
    return 1;
}

/* posixpath.normpath of an absolute path, into out (at least as large as path): no `.`, `..` or
 * repeated slashes, and a leading `//` kept as it is (POSIX leaves it to the system). */
static void normpath(const char *path, char *out)
{
    size_t root = path[1] == '/' && path[2] != '/' ? 2 : 1, len = root;
    memcpy(out, "//", root);
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        const char *end = strchrnul(p, '/');
        size_t n = (size_t)(end - p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            while (len > root && out[len - 1] != '/')
                len--;
            if (len > root)
                len--;
        } else if (n > 0 && !(n == 1 && p[0] == '.')) {
            if (len > root)
                out[len++] = '/';
            memcpy(out + len, p, n);
            len += n;
        }
        p = end;
    }
    out[len] = '\0';
}

/* entry.py's home_of into home (PATH_MAX bytes): WARDEN_HOME, `--home X` or `--home=X` before
 * `--` (the last one), `~` and `~/` with HOME, made absolute and normalised. 0 for anything
 * else (`~user`, no HOME, a path too long): Python finds that home itself. */
static int home_of(char *home)
{
    const char *raw = getenv("WARDEN_HOME");
    if (raw == NULL || raw[0] == '\0')
        raw = "~/.warden";
    int own = own_words();
    for (int i = 0; i < own; i++) {
        if (strcmp(args[i], "--home") == 0 && i + 1 < own)
            raw = args[i + 1];
        else if (strncmp(args[i], "--home=", 7) == 0)
            raw = args[i] + 7;
    }
    static char expanded[PATH_MAX], absolute[PATH_MAX];
    const char *user_home = getenv("HOME");
    if ((strcmp(raw, "~") == 0 || strncmp(raw, "~/", 2) == 0) && user_home && user_home[0]) {
        if (!join(expanded, sizeof expanded, user_home, raw[1] ? raw + 2 : ""))
            return 0;
        raw = expanded;
    }
    if (raw[0] == '~')
        return 0; /* os.path.expanduser would look the user up (pwd): Python's to do */
    if (raw[0] != '/') {
        char *cwd = getcwd(NULL, 0);
        int fits = cwd != NULL && join(absolute, sizeof absolute, cwd, raw);
        free(cwd);
        if (!fits)
            return 0;
        raw = absolute;
    }
    if (strlen(raw) >= PATH_MAX)
        return 0;
    normpath(raw, home);
    return 1;
}

/* entry.py's ours, on a folder open as `fd`: of this user's, no other may write to it (private:
 * nor read or enter). */
static int ours(int fd, int private)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
           (st.st_mode & (private ? 077 : 022)) == 0;
}

/* ---- the home's check: adapters/owned.py's home_problem, the same rules (change them together) */

/* owned.py's _private_group: `gid` is this user's private group (named as the user, the user's
 * primary group, no other member, no other user's primary group). */
static int private_group(gid_t gid)
{
    struct passwd *me = getpwuid(geteuid()), *other;
    if (me == NULL || me->pw_gid != gid)
        return 0;
    uid_t uid = me->pw_uid;
    size_t len = strlen(me->pw_name);
    char name[256];
    if (len >= sizeof name)
        return 0;
    memcpy(name, me->pw_name, len + 1); /* getgrgid and getpwent may reuse getpwuid's storage */
    struct group *group = getgrgid(gid);
    if (group == NULL || strcmp(group->gr_name, name) != 0)
        return 0;
    for (char **member = group->gr_mem; *member; member++)
        if (strcmp(*member, name) != 0)
            return 0;
    int alone = 1;
    setpwent();
    while (alone && (other = getpwent()) != NULL)
        alone = other->pw_gid != gid || other->pw_uid == uid;
    endpwent();
    return alone;
}

/* owned.py's _has_access_list, of the file open as `fd` (O_PATH: read through /proc). */
static int has_access_list(int fd)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if (getxattr(path, "system.posix_acl_access", NULL, 0) >= 0)
        return 1;
    return errno != ENODATA && errno != ENOTSUP; /* none, or none possible there */
}

/* owned.py's others_may_write: a user other than this one (root aside) may write the file `st`
 * describes, open as `fd`. */
static int others_may_write(const struct stat *st, int fd)
{
    if (st->st_mode & 002)
        return 1;
    if (!(st->st_mode & 020))
        return 0;
    return !private_group(st->st_gid) || has_access_list(fd);
}

/* As the kernel's limit on links followed in one lookup (ELOOP), owned.py's _MAX_LINKS. */
#define MAX_LINKS 40

/* owned.py's home_problem, by descriptors: `home` followed from `/` one entry at a time as the
 * kernel does (owned.py's _met), each entry opened without following it and looked at through
 * what was opened: every folder on the way and every link is this user's or root's, a folder on
 * the way no other may write to unless sticky (as /tmp), and the home itself (a link's target) a
 * folder of this user's no other may write to. Its descriptor (O_PATH), or -1 for anything else
 * (not made yet, unreadable, too long): Python then looks at it, and says what is wrong. What is
 * used after is the folder that was looked at, whatever is renamed meanwhile. */
static int trusted_home(const char *home)
{
    static char pending[2 * PATH_MAX], next[2 * PATH_MAX];
    uid_t me = geteuid();
    int links = 0, here = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (here < 0 || strlen(home) >= sizeof pending)
        goto refused;
    strcpy(pending, home);
    char *rest = pending;
    for (;;) {
        while (*rest == '/')
            rest++;
        if (*rest == '\0')
            return here; /* checked as the last entry, or `/` itself: refused below unless ours */
        char *end = strchrnul(rest, '/'), *name = rest;
        int last = *end == '\0' || end[strspn(end, "/")] == '\0';
        rest = *end ? end + 1 : end;
        *end = '\0';
        if (strcmp(name, ".") == 0)
            continue;
        int entry = openat(here, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (entry < 0 || fstat(entry, &st) < 0) {
            if (entry >= 0)
                close(entry);
            goto refused;
        }
        if (strcmp(name, "..") != 0 && st.st_uid != me && st.st_uid != 0) {
            close(entry);
            goto refused; /* its owner could put a folder of theirs in its place */
        }
        if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t n = readlinkat(entry, "", target, sizeof target - 1);
            close(entry);
            if (n <= 0 || ++links > MAX_LINKS)
                goto refused;
            target[n] = '\0';
            /* The target, then what was still to follow: from `/` when it is absolute, else
             * from the link's folder. */
            size_t more = strlen(rest);
            if ((size_t)n + 1 + more >= sizeof next)
                goto refused;
            memcpy(next, target, (size_t)n);
            next[n] = '/';
            memcpy(next + n + 1, rest, more + 1);
            memcpy(pending, next, (size_t)n + 2 + more);
            rest = pending;
            if (target[0] == '/') {
                close(here);
                if ((here = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
                    goto refused;
            }
            continue;
        }
        close(here);
        here = entry;
        /* `..` from a real folder is its real parent, one met on the way already. A folder on the
         * way: no other may write to it (and swap what is in it) unless it is sticky; the home
         * itself: not at all, and its own (below). */
        if (!S_ISDIR(st.st_mode) ||
            (!last && others_may_write(&st, entry) && !(st.st_mode & S_ISVTX)))
            goto refused;
    }
refused:
    if (here >= 0)
        close(here);
    return -1;
}

/* The home folder `home` opens to, once trusted_home took it: a folder of this user's no other
 * may write to (owned.py's home_problem, for the folder itself). */
static int home_folder(const char *home)
{
    int fd = trusted_home(home);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
                    others_may_write(&st, fd))) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- the request --------------------------------------------------------------------------- */

/* bytes.split()'s whitespace. */
static int is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Field `index` after the command name of a /proc/PID/stat text (0: the state), as entry.py
 * reads it (`rsplit(b")", 1)[1].split()[index]`), into out; 0 when there is none or it is long. */
static int stat_field(const char *text, size_t n, int index, char *out, size_t size)
{
    const char *p = memrchr(text, ')', n), *end = text + n;
    if (p == NULL)
        return 0;
    for (p++;; index--) {
        while (p < end && is_space(*p))
            p++;
        const char *start = p;
        while (p < end && !is_space(*p))
            p++;
        if (start == p)
            return 0;
        if (index == 0) {
            if ((size_t)(p - start) >= size)
                return 0;
            memcpy(out, start, (size_t)(p - start));
            out[p - start] = '\0';
            return 1;
        }
    }
}

/* Field `index` of /proc/PID/stat (see stat_field). */
static int proc_stat(long pid, int index, char *out, size_t size)
{
    char path[64], text[4096];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, text, sizeof text);
    close(fd);
    return n > 0 && stat_field(text, (size_t)n, index, out, size);
}

/* adapters/terminal_id.py's session_terminal(): this session as a terminal name, its leader's
 * start time with it (a session id alone is reused once its shell ends). */
static void session_terminal(char *out, size_t size)
{
    pid_t sid = getsid(0);
    char started[32];
    if (sid < 0)
        python();
    if (!proc_stat(sid, 19, started, sizeof started))
        strcpy(started, "0");
    snprintf(out, size, "WARDEN_TERMINAL=sid%d-%s", (int)sid, started);
}

/* What Python's C locale coercion (PEP 538) sets LC_CTYPE to in the Python client's own
 * environment, which it sends (and whose daemon has it too); NULL where Python sets nothing.
 * The same calls as CPython's _Py_CoerceLegacyLocale, so the same libc gives the same answer. */
static const char *coerced_ctype(void)
{
    static const char *targets[] = {"C.UTF-8", "C.utf8", "UTF-8"};
    const char *all = getenv("LC_ALL"), *choice = getenv("PYTHONCOERCECLOCALE");
    if ((all && all[0]) || (choice && !strcmp(choice, "0")))
        return NULL;
    if (choice && !strcmp(choice, "warn"))
        python(); /* Python says it coerced, on stderr */
    setlocale(LC_CTYPE, "");
    const char *now = setlocale(LC_CTYPE, NULL);
    if (now == NULL || strcmp(now, "C") != 0)
        return NULL;
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
        if (setlocale(LC_CTYPE, targets[i]) == NULL)
            continue;
        const char *codeset = nl_langinfo(CODESET);
        if (codeset && codeset[0])
            return targets[i];
        setlocale(LC_CTYPE, "");
    }
    return NULL;
}

/* Where an environment entry's name ends (its `=`), or NULL when it has none or an empty name:
 * entry.py's os.environ would drop the one and the daemon refuse the other. */
static const char *name_end(const char *entry)
{
    const char *eq = strchr(entry, '=');
    return eq == entry ? NULL : eq;
}

/* Set NAME=... (`entry`) in env (count entries, room for one more): in place where NAME is,
 * as setenv and a Python dict do, else at the end. */
static void put(char **env, int *count, const char *entry)
{
    size_t name = (size_t)(strchr(entry, '=') - entry) + 1;
    for (int i = 0; i < *count; i++) {
        if (strncmp(env[i], entry, name) == 0) {
            env[i] = (char *)entry;
            return;
        }
    }
    env[(*count)++] = (char *)entry;
}

/* qsort's order of environment entries by name (each has its `=`). */
static int by_name(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    size_t nx = (size_t)(strchr(x, '=') - x), ny = (size_t)(strchr(y, '=') - y);
    int order = memcmp(x, y, nx < ny ? nx : ny);
    return order ? order : (nx > ny) - (nx < ny);
}

/* Whether a name is in the environment twice: sorted, not every pair compared (an environment
 * of tens of thousands of variables took seconds, the daemon waiting on its request meanwhile). */
static int a_name_twice(char **env, int n)
{
    char **sorted = malloc((size_t)n * sizeof *sorted + 1);
    if (sorted == NULL)
        python();
    memcpy(sorted, env, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, by_name);
    int twice = 0;
    for (int i = 1; i < n && !twice; i++)
        twice = by_name(&sorted[i - 1], &sorted[i]) == 0;
    free(sorted);
    return twice;
}

/* The environment entry.py sends: os.environ's, in its order (so a name twice or an entry
 * without `=`, which os.environ would not keep as they are, goes to Python), with LC_CTYPE as
 * Python's start sets it and WARDEN_TERMINAL when unset or empty (the daemon's own session is
 * not this terminal's). Its count in *count. */
static char **request_env(int *count)
{
    static char ctype[32], terminal[96];
    int n = 0;
    while (environ[n])
        n++;
    char **env = calloc((size_t)n + 2, sizeof *env);
    if (env == NULL)
        python();
    for (int i = 0; i < n; i++) {
        if (name_end(environ[i]) == NULL)
            python();
        env[i] = environ[i];
    }
    if (a_name_twice(env, n))
        python();
    *count = n;
    const char *coerced = coerced_ctype();
    if (coerced) {
        snprintf(ctype, sizeof ctype, "LC_CTYPE=%s", coerced);
        put(env, count, ctype);
    }
    const char *given = getenv("WARDEN_TERMINAL");
    if (given == NULL || given[0] == '\0') {
        session_terminal(terminal, sizeof terminal);
        put(env, count, terminal);
    }
    return env;
}

/* entry.py's encode_request in a frame: its length (4 bytes, big-endian), then the magic, the
 * folder, the command line's length and words, the environment, NUL-separated. *size: the
 * frame's. NULL when it would be longer than the daemon takes (it would refuse it). */
static char *request_frame(size_t *size)
{
    int count;
    char **env = request_env(&count);
    char *cwd = getcwd(NULL, 0), words[16];
    if (cwd == NULL)
        python();
    snprintf(words, sizeof words, "%d", nargs);
    const char *head[] = {MAGIC, cwd, words};
    size_t total = 0;
    for (int i = 0; i < 3; i++)
        total += strlen(head[i]) + 1;
    for (int i = 0; i < nargs; i++)
        total += strlen(args[i]) + 1;
    for (int i = 0; i < count; i++)
        total += strlen(env[i]) + 1;
    total--; /* separators, not terminators */
    if (total > MAX_FRAME)
        return NULL;
    char *frame = malloc(4 + total + 1), *p;
    if (frame == NULL)
        python();
    p = frame + 4;
    for (int i = 0; i < 3 + nargs + count; i++) {
        const char *field = i < 3 ? head[i] : i < 3 + nargs ? args[i - 3] : env[i - 3 - nargs];
        size_t len = strlen(field) + 1;
        memcpy(p, field, len); /* with its NUL: the separator */
        p += len;
    }
    for (int i = 0; i < 4; i++)
        frame[i] = (char)(total >> (24 - 8 * i));
    free(cwd);
    free(env);
    *size = 4 + total;
    return frame;
}

/* entry.py's send_frame: the descriptors (SCM_RIGHTS) on the frame's first byte. Within the
 * socket's send timeout (SO_SNDTIMEO); MSG_NOSIGNAL: a daemon gone is an error, not SIGPIPE. */
static int send_frame(int sock, const char *data, size_t size, const int *fds, int nfds)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(8 * sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {(void *)data, size};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                         .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int))};
    struct cmsghdr *rights = CMSG_FIRSTHDR(&msg);
    rights->cmsg_level = SOL_SOCKET;
    rights->cmsg_type = SCM_RIGHTS;
    rights->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(rights), fds, (size_t)nfds * sizeof(int));
    ssize_t sent;
    while ((sent = sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    while (sent >= 0 && (size_t)sent < size) {
        ssize_t more = send(sock, data + sent, size - (size_t)sent, MSG_NOSIGNAL);
        if (more < 0 && errno != EINTR)
            return -1;
        sent += more > 0 ? more : 0;
    }
    return sent < 0 ? -1 : 0;
}

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

/* Up to n bytes into buf: how many came before the end (n unless it ended), -1 for an error or
 * descriptors sent along (none is taken: the kernel closes them). A signal's interruption goes
 * on waiting: the handler did its work.
 * Past `deadline` (now_ms(), 0: none), what the peer sent is read all the same (this process
 * may have been stopped, or starved, while the daemon's child said its pid and started the
 * command: falling back to Python would run it twice); when it sent nothing, the socket's
 * reading side is shut first, so that it can send nothing more (its send fails: the daemon's
 * child then runs nothing) and what it sent before is still read, then the end. */
static ssize_t receive(int sock, char *buf, size_t n, long long deadline)
{
    size_t got = 0;
    while (got < n) {
        if (deadline) {
            long long left = deadline - now_ms();
            struct pollfd ready = {sock, POLLIN, 0};
            if (left <= 0) {
                if (poll(&ready, 1, 0) != 1)
                    shutdown(sock, SHUT_RD);
                deadline = 0;
                continue;
            }
            if (poll(&ready, 1, left > 60000 ? 60000 : (int)left) <= 0)
                continue;
        }
        struct iovec iov = {buf + got, n - got};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        ssize_t r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || msg.msg_flags & MSG_CTRUNC)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* entry.py's recv_frame: 1 with the frame in *body (NUL-ended, its length in *size), 0 at a
 * clean end, -1 for anything else (longer than MAX_FRAME, cut short, an error); a `deadline`
 * as entry.py's last_look (see receive). */
static int recv_frame(int sock, long long deadline, char **body, size_t *size)
{
    unsigned char head[4];
    ssize_t got = receive(sock, (char *)head, 4, deadline);
    if (got == 0)
        return 0;
    if (got != 4)
        return -1;
    *size = (size_t)head[0] << 24 | (size_t)head[1] << 16 | (size_t)head[2] << 8 | head[3];
    if (*size > MAX_FRAME || (*body = malloc(*size + 1)) == NULL)
        return -1;
    if (receive(sock, *body, *size, deadline) != (ssize_t)*size) {
        free(*body);
        return -1;
    }
    (*body)[*size] = '\0';
    return 1;
}

/* Whether an answer of the daemon's, `WORD VALUE` (entry.py's _answer), is `word`. */
static int is_word(const char *body, size_t size, const char *word)
{
    size_t len = strlen(word);
    return size >= len && memcmp(body, word, len) == 0 && (size == len || body[len] == ' ');
}

/* Whether the answer is `word` with a decimal VALUE, into *value: ASCII digits as the daemon
 * writes them, a `-` first when `sign`, at most 18 (a pid, an exit status: far fewer). Anything
 * else is no such answer, as for entry.py's _number. */
static int answer(const char *body, size_t size, const char *word, int sign, long long *value)
{
    size_t i = strlen(word) + 1;
    if (!is_word(body, size, word) || size <= i)
        return 0;
    int negative = sign && body[i] == '-';
    i += (size_t)negative;
    if (i == size || size - i > 18)
        return 0;
    long long number = 0;
    for (; i < size; i++) {
        if (body[i] < '0' || body[i] > '9')
            return 0;
        number = number * 10 + (body[i] - '0');
    }
    *value = negative ? -number : number;
    return 1;
}

/* ---- the run ------------------------------------------------------------------------------- */

static pid_t child;     /* the daemon's child that runs the command */
static int verified;    /* it is a child of the daemon's: signals go to it */
static volatile sig_atomic_t received; /* a bit for each signal this process got */

/* Signals a person or a supervisor sends to stop a command: passed on to the daemon's child. */
static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void forward(int sig)
{
    int saved = errno;
    received |= 1 << sig;
    if (verified)
        kill(child, sig);
    errno = saved;
}

/* The command's exit status once the daemon's child has said its pid (entry.py's _served, past
 * its pid): signals forwarded, frames read until `status N`. */
static _Noreturn void follow(int sock, pid_t peer)
{
    char ppid[32];
    verified = child > 0 && proc_stat(child, 1, ppid, sizeof ppid) && strtol(ppid, NULL, 10) == peer;
    /* No SA_RESTART: the wait is retried here. Each handler runs with the others held back, so
     * that none loses another's bit in `received`. */
    struct sigaction action = {.sa_handler = forward};
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++)
        sigaddset(&action.sa_mask, forwarded[i]);
    for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++)
        sigaction(forwarded[i], &action, NULL);
    for (;;) {
        char *body = NULL;
        size_t size = 0;
        int got = recv_frame(sock, 0, &body, &size);
        long long status;
        if (got == 1 && answer(body, size, "status", 1, &status)) {
            /* Killed by a signal it passed on (SIGTERM, SIGHUP, SIGQUIT; SIGINT is Warden's
             * "interrupted", 130): this process ends by it too, as one running the command
             * itself would, so its parent sees the same death. */
            for (size_t i = 1; i < sizeof forwarded / sizeof *forwarded; i++) {
                int sig = forwarded[i];
                if (received & (1 << sig) && status == 128 + sig) {
                    signal(sig, SIG_DFL);
                    kill(getpid(), sig);
                }
            }
            _exit((int)(status & 0xFF)); /* what an exit status keeps */
        }
        /* Another `pid` is read past; anything else, or the end, is a runner that went wrong. */
        if (got != 1 || !is_word(body, size, "pid")) {
            fputs("warden: the daemon's runner ended without the command's status\n", stderr);
            _exit(1);
        }
        free(body);
    }
}

/* entry.py's _through_daemon and _served: the run through the home's daemon, this process
 * ending with its status; a return only where Python is to run it. */
static void through_daemon(const char *home)
{
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    /* A home of another user's (or open to others), a run folder others may enter: no daemon
     * of ours serves it. Both are used by the descriptors looked at, not by name again: a folder
     * renamed into their place meanwhile is not the one the socket is looked for in. */
    int folder = home_folder(home);
    int run = folder < 0 ? -1 : openat(folder, "run", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (run < 0 || !ours(run, 1))
        return;
    snprintf(address.sun_path, sizeof address.sun_path, "/proc/self/fd/%d/daemon.sock", run);
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval limit = {CONNECT_S, 0};
    if (sock < 0 || setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit) < 0 ||
        connect(sock, (struct sockaddr *)&address, sizeof address) < 0)
        return; /* no daemon: Python runs it and starts one */
    /* The peer is a process of this user's (a socket another made in our folder is not ours). */
    struct ucred peer;
    socklen_t len = sizeof peer;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &peer, &len) < 0 || peer.uid != geteuid())
        return;
    /* Proof that this process may write in the home (a Landlock ruleset or a read-only mount
     * around it would refuse the open), and a pidfd of itself: the daemon judges this very
     * process, not one that may take its pid. */
    int proof = openat(run, "daemon.lock", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    int me = proof < 0 ? -1 : (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (me < 0)
        return;
    size_t size;
    char *frame = request_frame(&size), *body = NULL;
    int fds[] = {0, 1, 2, proof, me};
    /* Nothing has started before the pid comes: past this wait Python runs it (the daemon's
     * child then cannot say its pid and runs nothing). */
    long long pid;
    int sent = frame != NULL && send_frame(sock, frame, size, fds, 5) == 0;
    if (!sent || recv_frame(sock, now_ms() + ANSWER_MS, &body, &size) != 1 ||
        !answer(body, size, "pid", 0, &pid))
        return; /* a stale daemon (other code, another environment): it says why in its log */
    close(proof);
    close(me);
    child = pid > 0 && pid <= INT_MAX ? (pid_t)pid : 0;
    follow(sock, peer.pid);
}

int main(int argc, char **argv)
{
    standard_streams();
    /* argc 0 (an execve with an empty argv, which kernels before 5.18 let through): no words,
     * not -1 of them (python() would copy SIZE_MAX of them). */
    args = argc > 0 ? argv + 1 : argv;
    nargs = argc > 0 ? argc - 1 : 0;
    static char home[PATH_MAX];
    if (wanted() && home_of(home))
        through_daemon(home);
    python();
}
