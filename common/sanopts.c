/*
 * sanopts.c -- the sanitizer runtime's defaults for every program of a sanitizer build
 * (--enable-sanitizers); linked only into those programs, never into the library.
 *
 * Why: GCC 12's sanitizer runtime (libasan 8, as in Debian 12) intercepts __tls_get_addr
 * to record each thread's dynamic TLS blocks for LeakSanitizer. To find a block's size it
 * still assumes glibc < 2.25's allocator: a block whose start is 16 bytes past a page
 * boundary is taken to carry a {start, size} header in the 16 bytes before it. glibc 2.25
 * dropped that header and allocates dynamic TLS with malloc, so a block that lands there
 * by chance (it depends on argv, the environment and which Open MPI components are
 * loaded) makes the runtime record a range read from unrelated heap bytes. At exit,
 * LeakSanitizer scans that range and its tracer dies: "Tracer caught signal 11 ...
 * LeakSanitizer has encountered a fatal error" (google/sanitizers issue 1322; fixed in
 * LLVM 17, which asks its allocator for the block instead). Seen with mpitrain-info
 * --help: Open MPI's components are loaded by MPI_Init and one of them has TLS.
 *
 * Turning the interceptor off costs LeakSanitizer nothing here: dynamic TLS blocks are
 * malloc'd chunks reachable from the thread's DTV, which the scanned static TLS points
 * to, so what they hold is still seen. mpitrain's own thread-locals are static TLS (the
 * library is linked, not loaded with dlopen). Leak detection stays on.
 *
 * The environment's ASAN_OPTIONS are read after these defaults and may override them.
 */
#if defined(__GNUC__)
#define MT__SANOPTS_EXPORT __attribute__((visibility("default"), used))
#else
#define MT__SANOPTS_EXPORT
#endif

const char *__asan_default_options(void);

MT__SANOPTS_EXPORT const char *__asan_default_options(void)
{
    return "intercept_tls_get_addr=0";
}
