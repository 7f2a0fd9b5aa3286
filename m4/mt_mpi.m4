# mt_mpi.m4 -- which MPI family mpitrain builds against, and the parallel HDF5 of that
# family. Both families are Debian's packages: Open MPI (openmpi-bin, libopenmpi-dev,
# libhdf5-openmpi-dev) and MPICH (mpich, libmpich-dev, libhdf5-mpich-dev); Debian names
# each family's programs with its suffix (mpicc.openmpi, mpicc.mpich, h5pcc.mpich) and
# points the plain names at one of them through its alternatives.
#
# MT_CHECK_MPI: --with-mpi=openmpi|mpich (default: the family of the mpicc found, or of
# CC when given). Sets CC to the family's compiler wrapper unless CC is given, MPIRUN to
# its launcher, MT_MPI_FAMILY (openmpi or mpich; AC_SUBST, and MT_MPI_FAMILY_OPENMPI or
# MT_MPI_FAMILY_MPICH defined as 1), and checks that the compiler's mpi.h is that family's.
#
# MT_CHECK_HDF5: the parallel HDF5 of that family: pkg-config hdf5-openmpi or hdf5-mpich,
# else h5pcc.FAMILY (or h5pcc) -show; HDF5_CFLAGS and HDF5_LIBS. HDF5_CFLAGS and HDF5_LIBS
# given on the command line win.

# MT_MPI_HEADER_FAMILY: the family of the mpi.h $CC sees, in mt_hdr_family
# (openmpi, mpich or unknown).
AC_DEFUN([MT_MPI_HEADER_FAMILY], [
  mt_hdr_family=unknown
  AC_PREPROC_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#ifndef OPEN_MPI
#error not Open MPI
#endif]])], [mt_hdr_family=openmpi],
    [AC_PREPROC_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#ifndef MPICH_VERSION
#error not MPICH
#endif]])], [mt_hdr_family=mpich])])
])

AC_DEFUN([MT_CHECK_MPI], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi=FAMILY],
      [build against this MPI family: openmpi or mpich (default: the family of the mpicc found, or of CC when given)])],
    [], [with_mpi=check])
  AS_CASE([$with_mpi],
    [openmpi|mpich|check], [],
    [yes], [with_mpi=check],
    [AC_MSG_ERROR([--with-mpi=$with_mpi: expected openmpi or mpich])])
  mt_pkgs_openmpi="openmpi-bin libopenmpi-dev"
  mt_pkgs_mpich="mpich libmpich-dev"
  # the compiler wrapper: the family's own name first, then plain mpicc (checked below)
  AS_IF([test "x$with_mpi" = xcheck],
    [AC_CHECK_PROGS([MPICC], [mpicc], [])],
    [AC_CHECK_PROGS([MPICC], [mpicc.$with_mpi mpicc], [])])
  AS_IF([test -z "$MPICC" && test -z "$CC"],
    [AS_IF([test "x$with_mpi" = xmpich],
       [AC_MSG_ERROR([mpicc.mpich not found: install the Debian packages $mt_pkgs_mpich (or run scripts/setup.sh --mpich)])],
       [AC_MSG_ERROR([mpicc not found: install the Debian packages $mt_pkgs_openmpi (or run scripts/setup.sh)])])])
  AS_IF([test -z "$CC"], [CC="$MPICC"])
])

# After AC_PROG_CC: the family of $CC's mpi.h, checked against --with-mpi, and the launcher.
AC_DEFUN([MT_CHECK_MPI_FAMILY], [
  AC_MSG_CHECKING([which MPI family $CC builds against])
  MT_MPI_HEADER_FAMILY
  AC_MSG_RESULT([$mt_hdr_family])
  AS_IF([test "x$mt_hdr_family" = xunknown],
    [AC_MSG_ERROR([$CC does not include an Open MPI or MPICH mpi.h: install the Debian packages $mt_pkgs_openmpi (or $mt_pkgs_mpich), or give CC=mpicc.openmpi or CC=mpicc.mpich])])
  AS_IF([test "x$with_mpi" != xcheck && test "x$with_mpi" != "x$mt_hdr_family"],
    [AC_MSG_ERROR([--with-mpi=$with_mpi, but $CC builds against $mt_hdr_family: give CC=mpicc.$with_mpi, or install the Debian packages of $with_mpi (mpicc.$with_mpi)])])
  MT_MPI_FAMILY=$mt_hdr_family
  AC_SUBST([MT_MPI_FAMILY])
  AS_IF([test "x$MT_MPI_FAMILY" = xopenmpi],
    [AC_DEFINE([MT_MPI_FAMILY_OPENMPI], [1], [Built against Open MPI])],
    [AC_DEFINE([MT_MPI_FAMILY_MPICH], [1], [Built against MPICH])])
  # the launcher of that family: Debian's suffixed name, else a plain one that says it is
  AC_PATH_PROGS([MPIRUN], [mpirun.$MT_MPI_FAMILY mpiexec.$MT_MPI_FAMILY], [])
  AS_IF([test -z "$MPIRUN"], [
    AC_PATH_PROGS([mt_plain_mpirun], [mpirun mpiexec], [])
    AS_IF([test -n "$mt_plain_mpirun"], [
      mt_run_version=`"$mt_plain_mpirun" --version 2>&1 | head -n 3`
      AS_CASE([$MT_MPI_FAMILY:$mt_run_version],
        [openmpi:*"Open MPI"*|openmpi:*OpenRTE*|mpich:*HYDRA*|mpich:*MPICH*], [MPIRUN=$mt_plain_mpirun])])])
  mt_run_pkg=openmpi-bin
  AS_IF([test "x$MT_MPI_FAMILY" = xmpich], [mt_run_pkg=mpich])
  AS_IF([test -z "$MPIRUN"],
    [AC_MSG_ERROR([no $MT_MPI_FAMILY launcher (mpirun.$MT_MPI_FAMILY or an mpirun of that family): install the Debian package $mt_run_pkg])])
  AC_SUBST([MPIRUN])
  AM_CONDITIONAL([MT_OPENMPI], [test "x$MT_MPI_FAMILY" = xopenmpi])
])

AC_DEFUN([MT_CHECK_HDF5], [
  AC_ARG_VAR([HDF5_CFLAGS], [C compiler flags for parallel HDF5, overriding pkg-config and h5pcc])
  AC_ARG_VAR([HDF5_LIBS], [linker flags for parallel HDF5, overriding pkg-config and h5pcc])
  mt_h5_pkg=libhdf5-$MT_MPI_FAMILY-dev
  AS_IF([test -n "$HDF5_CFLAGS$HDF5_LIBS"], [mt_h5_from="HDF5_CFLAGS and HDF5_LIBS"],
    [PKG_CHECK_MODULES([HDF5], [hdf5-$MT_MPI_FAMILY], [mt_h5_from="pkg-config hdf5-$MT_MPI_FAMILY"], [
       AC_PATH_PROGS([H5PCC], [h5pcc.$MT_MPI_FAMILY h5pcc], [])
       mt_h5_from=""
       AS_IF([test -n "$H5PCC"], [
         # h5pcc -show prints the compile line: keep the -I, -L and -l words and the
         # libraries named by path, a static one as its shared twin where there is one
         # (libmpitrain is a shared library: Debian's libhdf5.a is not position-independent)
         mt_h5_show=`"$H5PCC" -show 2>/dev/null`
         for w in $mt_h5_show; do
           AS_CASE([$w],
             [-I*|-D*], [HDF5_CFLAGS="$HDF5_CFLAGS $w"],
             [*.a], [mt_h5_dir=`dirname "$w"`; mt_h5_lib=`basename "$w" .a`
                     AS_IF([test -f "$mt_h5_dir/$mt_h5_lib.so"],
                       [HDF5_LIBS="$HDF5_LIBS -L$mt_h5_dir -l${mt_h5_lib#lib}"],
                       [HDF5_LIBS="$HDF5_LIBS $w"])],
             [-L*|-l*|*.so], [HDF5_LIBS="$HDF5_LIBS $w"])
         done
         AS_IF([test -n "$HDF5_LIBS"], [mt_h5_from="$H5PCC -show"])])
       AS_IF([test -z "$mt_h5_from"],
         [AC_MSG_ERROR([parallel HDF5 for $MT_MPI_FAMILY not found (pkg-config hdf5-$MT_MPI_FAMILY, h5pcc.$MT_MPI_FAMILY): install the Debian package $mt_h5_pkg, or give HDF5_CFLAGS and HDF5_LIBS])])])])
  AC_MSG_CHECKING([where parallel HDF5 comes from])
  AC_MSG_RESULT([$mt_h5_from])
  mt_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $HDF5_CFLAGS"
  AC_CHECK_DECL([H5Pset_fapl_mpio], [],
    [AC_MSG_ERROR([the HDF5 found ($mt_h5_from) was built without MPI-IO: install the Debian package $mt_h5_pkg])],
    [[#include <hdf5.h>]])
  AC_MSG_CHECKING([whether that HDF5 is parallel])
  AC_PREPROC_IFELSE([AC_LANG_PROGRAM([[#include <hdf5.h>
#include <H5pubconf.h>
#if !defined(H5_HAVE_PARALLEL)
#error not parallel
#endif]])], [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no]); AC_MSG_ERROR([the HDF5 found ($mt_h5_from) is not parallel: install the Debian package $mt_h5_pkg])])
  CPPFLAGS=$mt_save_CPPFLAGS
])
