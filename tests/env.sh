# Sourced by every test (AM_TESTS_ENVIRONMENT): what Open MPI needs as root and
# oversubscribed, and the sanitizer settings. Sets only what the caller has not set.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# shared-memory transport without ptrace-based single copy (refused in containers)
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
# a laptop or CI box has no high-speed network: keep Open MPI from probing for one
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp}
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_osc=${OMPI_MCA_osc:-sm,pt2pt}
# one host: TCP (spawn mode's parent and children, the launcher's daemons) over loopback
# only, so that an interface the emulated cluster adds or removes meanwhile (tests/cluster.sh's
# bridges, of this suite or of another checkout's) is never tried: spawn.sh once failed with
# "bind on local address (10.81.4.254:0) failed". The cluster tests set their own subnet.
export OMPI_MCA_btl_tcp_if_include=${OMPI_MCA_btl_tcp_if_include:-lo}
export OMPI_MCA_oob_tcp_if_include=${OMPI_MCA_oob_tcp_if_include:-lo}
# Open MPI leaks at MPI_Finalize; tests/lsan.supp names only its libraries, and needs
# full stacks to match them.
supp="${top_srcdir:-.}/tests/lsan.supp"
case "$supp" in /*) ;; *) supp="$PWD/$supp" ;; esac
export ASAN_OPTIONS=${ASAN_OPTIONS:-fast_unwind_on_malloc=0:detect_leaks=1:abort_on_error=0}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# timeouts scale on slow machines: MT_TEST_TIMEOUT_SCALE=3 make check
export MT_TEST_TIMEOUT_SCALE=${MT_TEST_TIMEOUT_SCALE:-1}
