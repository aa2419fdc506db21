# Cross-compiling for aarch64 Linux with Debian's gcc-aarch64-linux-gnu and
# the arm64 multiarch -dev packages (scripts/setup_cross.sh); ctest runs the
# test binaries under qemu-aarch64 (scripts/cross.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# pkg-config finds the arm64 .pc files only
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
# The arm64 multiarch runtime (libc6:arm64 and the libraries above) is what the
# binaries load: with -L /usr/aarch64-linux-gnu, the cross sysroot's ld.so
# meets the multiarch libc and threads hang in pthread_create.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
