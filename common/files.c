/*
 * files.c -- file-system helpers every layer may use: create a folder path, remove a tree
 * (never following a link), replace a file atomically (temporary file, fsync, rename,
 * fsync of the folder), append to a log whole or not at all, and cut the torn last line
 * a crash left. Every failure names the file and the system's reason (strerror: "No space
 * left on device"), and a failed write leaves no temporary file behind.
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
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return mt__error(MT_EIO, "cannot write %s: %s", tmp, strerror(errno));
    int rc = MT_OK;
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
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? MT_OK : mt__error(MT_EIO, "cannot open %s: %s", path, strerror(errno));
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
