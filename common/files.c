/*
 * files.c -- file-system helpers every layer may use: create a folder path, remove a tree
 * (never following a link), replace a file atomically (temporary file, fsync, rename,
 * fsync of the folder), append to a log whole or not at all, and cut the torn last line
 * a crash left. Every failure names the file and the system's reason (strerror: "No space
 * left on device"), and a failed write leaves no temporary file behind. A run directory's
 * files are opened by mt__run_open only: never through a symbolic link, never a FIFO or a
 * file with a second name, and created with O_EXCL, so a link put where a run file should
 * be is an error naming it, never a write to (or a truncation of) the file it points at.
 */
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int mt__mkdirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return mt__error(MT_EIO, "cannot create %s: %s", buf, strerror(errno));
            *p = '/';
        }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return mt__error(MT_EIO, "cannot create %s: %s", buf, strerror(errno));
    if (access(buf, W_OK) != 0)
        return mt__error(MT_EIO, "%s is not writable: %s", buf, strerror(errno));
    return MT_OK;
}

int mt__fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    int bad = fd < 0 || fsync(fd) != 0;
    if (fd >= 0)
        close(fd);
    return bad ? mt__error(MT_EIO, "fsync of folder %s failed: %s", path, strerror(errno)) : MT_OK;
}

int mt__rmtree(const char *path)
{
    /* a symbolic link is removed, never followed: a link in a run directory must not
     * take the files it points at with it */
    struct stat top;
    DIR *d = lstat(path, &top) == 0 && S_ISDIR(top.st_mode) ? opendir(path) : NULL;
    if (!d)
        return unlink(path) == 0 || errno == ENOENT
                   ? MT_OK
                   : mt__error(MT_EIO, "cannot remove %s: %s", path, strerror(errno));
    struct dirent *e;
    int rc = MT_OK;
    while ((e = readdir(d)) && !rc) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            rc = mt__rmtree(sub);
        else if (unlink(sub) != 0)
            rc = mt__error(MT_EIO, "cannot remove %s: %s", sub, strerror(errno));
    }
    closedir(d);
    if (!rc && rmdir(path) != 0)
        rc = mt__error(MT_EIO, "cannot remove %s: %s", path, strerror(errno));
    return rc;
}

int mt__write_atomic(const char *dir, const char *name, const char *text)
{
    char tmp[4096], final[4096];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    snprintf(final, sizeof final, "%s/%s", dir, name);
    /* what is in the way is the library's own leftover or a link put there: the name goes,
     * whatever it pointed at stays as it was; then the temporary file is created new */
    if (unlink(tmp) != 0 && errno != ENOENT)
        return mt__error(MT_EIO, "cannot remove %s: %s", tmp, strerror(errno));
    int rc = mt__run_check(final);
    if (rc != MT_OK && rc != MT_ENOTFOUND)
        return rc; /* a link or a folder where the file goes: named, left alone */
    int fd = mt__run_open(tmp, O_WRONLY | O_CREAT, 0644);
    if (fd < 0)
        return fd;
    rc = MT_OK;
    size_t len = strlen(text), done = 0;
    while (done < len && !rc) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            rc = mt__error(MT_EIO, "write to %s failed: %s", tmp,
                           n < 0 ? strerror(errno) : "no progress");
        else
            done += (size_t)n;
    }
    if (!rc && fsync(fd) != 0)
        rc = mt__error(MT_EIO, "fsync of %s failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !rc)
        rc = mt__error(MT_EIO, "close of %s failed: %s", tmp, strerror(errno));
    int there = rc ? MT_OK : mt__run_check(final); /* again: it may have appeared since */
    if (!rc && there != MT_OK && there != MT_ENOTFOUND)
        rc = there;
    if (!rc && rename(tmp, final) != 0)
        rc = mt__error(MT_EIO, "rename %s to %s failed: %s", tmp, final, strerror(errno));
    if (rc) { /* the old file stays as it was; no temporary is left behind */
        unlink(tmp);
        return rc;
    }
    return mt__fsync_dir(dir);
}

int mt__append_whole(FILE *f, const char *dir, const char *name, const char *p, size_t n)
{
    int fd = fileno(f);
    off_t start = lseek(fd, 0, SEEK_END);
    size_t done = 0;
    int e = start < 0 ? errno : 0;
    while (!e && done < n) {
        ssize_t w = write(fd, p + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            e = w < 0 ? errno : EIO;
        else
            done += (size_t)w;
    }
    if (!e)
        return MT_OK;
    if (start >= 0 && ftruncate(fd, start) != 0)
        fprintf(stderr, "mpitrain: warning: %s/%s: cannot cut a partial row back: %s (the next "
                "start cuts it)\n", dir, name, strerror(errno));
    return mt__error(MT_EIO, "%s/%s: write failed: %s", dir, name, strerror(e));
}

int mt__cut_torn_tail(const char *path, off_t *cut)
{
    *cut = 0;
    int fd = mt__run_check(path);
    if (fd == MT_ENOTFOUND)
        return MT_OK;
    if (fd != MT_OK || (fd = mt__run_open(path, O_RDWR, 0)) < 0)
        return fd; /* a link or another file's name is never cut */
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? MT_OK : mt__error(MT_EIO, "cannot stat %s: %s", path, strerror(errno));
    off_t end = rc ? 0 : st.st_size, keep = 0;
    char buf[4096];
    bool found = false;
    /* backwards from the end to the last newline */
    for (off_t pos = end; !rc && !found && pos > 0;) {
        size_t n = pos < (off_t)sizeof buf ? (size_t)pos : sizeof buf;
        pos -= (off_t)n;
        ssize_t got = pread(fd, buf, n, pos);
        if (got != (ssize_t)n) {
            rc = mt__error(MT_EIO, "cannot read %s: %s", path, got < 0 ? strerror(errno) : "short read");
            break;
        }
        for (size_t i = n; i-- > 0;)
            if (buf[i] == '\n') {
                keep = pos + (off_t)i + 1;
                found = true;
                break;
            }
    }
    if (!rc && keep < end) {
        if (ftruncate(fd, keep) != 0 || fsync(fd) != 0)
            rc = mt__error(MT_EIO, "cannot cut the torn last line of %s: %s", path, strerror(errno));
        else
            *cut = end - keep;
    }
    close(fd);
    return rc;
}

/* ------------------------------------------------------------ files of a run directory */

static const char *kind_of(mode_t m)
{
    return S_ISLNK(m) ? "a symbolic link" : S_ISDIR(m) ? "a folder" : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket" : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "not a file";
}

/* The error for what lstat found at path where a regular file of the run should be. */
static int not_a_run_file(const char *path, const struct stat *st, bool writing)
{
    if (S_ISREG(st->st_mode)) /* then it has another name */
        return mt__error(MT_EIO, "%s has %lu names (a hard link): a run file with a name "
                         "outside the run is never %s; remove that name or this file", path,
                         (unsigned long)st->st_nlink, writing ? "written" : "read");
    return mt__error(MT_EIO, "%s is %s, not a file of the run: the library never opens a run "
                     "file through a link or in place of something else; remove it", path,
                     kind_of(st->st_mode));
}

int mt__run_check(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT || errno == ENOTDIR ? MT_ENOTFOUND
                               : mt__error(MT_EIO, "cannot stat %s: %s", path, strerror(errno));
    return S_ISREG(st.st_mode) ? MT_OK : not_a_run_file(path, &st, false);
}

int mt__run_open(const char *path, int flags, mode_t mode)
{
    bool writing = (flags & O_ACCMODE) != O_RDONLY;
    if (flags & O_CREAT)
        flags |= O_EXCL;
    /* O_NONBLOCK: a FIFO put in a file's place opens at once (and is refused below) */
    int fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode);
    struct stat st;
    if (fd < 0) {
        int e = errno;
        if (lstat(path, &st) == 0 && (!S_ISREG(st.st_mode) || (writing && st.st_nlink > 1)))
            return not_a_run_file(path, &st, writing);
        if (e == ENOENT)
            return mt__error(MT_ENOTFOUND, "%s: no such file", path);
        if (e == EEXIST)
            return mt__error(MT_EIO, "%s exists already: a run file is created new, never "
                             "written over a file the library did not create", path);
        return mt__error(MT_EIO, "cannot %s %s: %s", flags & O_CREAT ? "create" : "open", path,
                         strerror(e));
    }
    int rc = fstat(fd, &st) != 0 ? mt__error(MT_EIO, "cannot stat %s: %s", path, strerror(errno))
             : !S_ISREG(st.st_mode) || (writing && st.st_nlink > 1) ? not_a_run_file(path, &st, writing)
             : fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0
                 ? mt__error(MT_EIO, "cannot open %s: %s", path, strerror(errno))
                 : MT_OK;
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

FILE *mt__run_fopen(const char *path, const char *mode, int *rc)
{
    int fd = -1;
    if (!strcmp(mode, "r"))
        fd = mt__run_open(path, O_RDONLY, 0);
    else if (!strcmp(mode, "x"))
        fd = mt__run_open(path, O_WRONLY | O_CREAT, 0644);
    else { /* "a": the file there, else a new one */
        fd = mt__run_open(path, O_WRONLY | O_APPEND, 0);
        if (fd == MT_ENOTFOUND)
            fd = mt__run_open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    }
    FILE *f = fd >= 0 ? fdopen(fd, !strcmp(mode, "x") ? "w" : mode) : NULL;
    if (fd >= 0 && !f) {
        close(fd);
        fd = mt__error(MT_ENOMEM, "cannot open %s: %s", path, strerror(errno));
    }
    if (rc)
        *rc = f ? MT_OK : fd;
    return f;
}
