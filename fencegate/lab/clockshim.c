/*
 * fencegate clock shim: shift a process's wall clock by an offset that can change mid-run.
 *
 * LD_PRELOAD this library and set FENCEGATE_CLOCK_OFFSET_FILE to a file holding
 * the offset in seconds (e.g. "120" or "-1.5"). clock_gettime on the realtime
 * clocks, gettimeofday and time return the real time plus the offset; the
 * monotonic clocks are untouched. The file is checked again whenever at least
 * RECHECK_NS of real time has passed, and reread when its inode, size or mtime
 * changed, so a redis-server that reads the clock every event-loop cycle sees
 * a jump within milliseconds.
 *
 * Why not libfaketime: Debian's redis-server never gets to listen under it
 * (its initialisation recurses through jemalloc's clock_gettime). This shim
 * allocates nothing and calls no libc function that could read the clock: it
 * reads its control file through raw syscalls, and looks up the real
 * clock_gettime (the vDSO's) under a re-entrancy guard, using the raw syscall
 * until that lookup has finished.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define ENV_NAME "FENCEGATE_CLOCK_OFFSET_FILE"
#define RECHECK_NS 1000000LL /* 1 ms */
#define NS 1000000000LL

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static __thread int resolving;
static int64_t offset_ns;     /* accessed with __atomic builtins: redis has background threads */
static int64_t last_check_ns; /* real realtime of the last stat, in ns */
static struct stat last_stat;
static int have_stat;

static int raw_clock_gettime(clockid_t id, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, id, ts);
}

static int64_t parse_offset_ns(const char *buf, ssize_t len) {
    int64_t whole = 0, frac = 0, scale = NS;
    int negative = 0, i = 0, in_frac = 0;
    while (i < len && (buf[i] == ' ' || buf[i] == '\t')) i++;
    if (i < len && (buf[i] == '-' || buf[i] == '+')) negative = buf[i++] == '-';
    for (; i < len; i++) {
        char c = buf[i];
        if (c == '.' && !in_frac) { in_frac = 1; continue; }
        if (c < '0' || c > '9') break;
        if (in_frac) {
            if (scale > 1) { scale /= 10; frac += (c - '0') * scale; }
        } else {
            whole = whole * 10 + (c - '0');
        }
    }
    int64_t total = whole * NS + frac;
    return negative ? -total : total;
}

static void refresh_offset(int64_t real_ns) {
    int64_t last = __atomic_load_n(&last_check_ns, __ATOMIC_RELAXED);
    if (real_ns >= last && real_ns - last < RECHECK_NS) return;
    __atomic_store_n(&last_check_ns, real_ns, __ATOMIC_RELAXED);
    const char *path = getenv(ENV_NAME);
    if (path == NULL) return;
    struct stat st;
    if (syscall(SYS_newfstatat, AT_FDCWD, path, &st, 0) != 0) {
        __atomic_store_n(&offset_ns, 0, __ATOMIC_RELAXED); /* no file: no offset */
        have_stat = 0;
        return;
    }
    if (have_stat && st.st_ino == last_stat.st_ino && st.st_size == last_stat.st_size &&
        st.st_mtim.tv_sec == last_stat.st_mtim.tv_sec && st.st_mtim.tv_nsec == last_stat.st_mtim.tv_nsec)
        return;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[64];
    ssize_t len = syscall(SYS_read, fd, buf, sizeof buf);
    syscall(SYS_close, fd);
    if (len <= 0) return;
    __atomic_store_n(&offset_ns, parse_offset_ns(buf, len), __ATOMIC_RELAXED);
    last_stat = st;
    have_stat = 1;
}

static int is_realtime(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_TAI
#ifdef CLOCK_REALTIME_ALARM
           || id == CLOCK_REALTIME_ALARM
#endif
        ;
}

/* The real clock_gettime (the vDSO's, fast) once resolved; the raw syscall before, and while resolving:
 * dlsym may allocate, and the allocator (jemalloc in redis) reads clocks. */
static int real_now(clockid_t id, struct timespec *ts) {
    clock_gettime_fn real = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);
    if (real == NULL) {
        if (resolving) return raw_clock_gettime(id, ts);
        resolving = 1;
        real = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        resolving = 0;
        if (real == NULL) return raw_clock_gettime(id, ts);
        __atomic_store_n(&real_clock_gettime, real, __ATOMIC_RELEASE);
    }
    return real(id, ts);
}

static void shifted_now(clockid_t id, struct timespec *ts) {
    real_now(id, ts);
    int64_t real_ns = (int64_t)ts->tv_sec * NS + ts->tv_nsec;
    refresh_offset(real_ns);
    int64_t shifted = real_ns + __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
    ts->tv_sec = (time_t)(shifted / NS);
    ts->tv_nsec = (long)(shifted % NS);
    if (ts->tv_nsec < 0) { ts->tv_nsec += NS; ts->tv_sec -= 1; }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    if (is_realtime(id)) {
        shifted_now(id, ts);
        return 0;
    }
    return real_now(id, ts);
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz; /* the timezone argument is obsolete; glibc leaves it alone too */
    struct timespec ts; /* glibc declares tv nonnull, so there is no NULL case to handle */
    shifted_now(CLOCK_REALTIME, &ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    shifted_now(CLOCK_REALTIME, &ts);
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
