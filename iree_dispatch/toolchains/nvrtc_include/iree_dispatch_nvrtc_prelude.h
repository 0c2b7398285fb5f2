// Pre-included by iree_dispatch's NVRTC toolchain (iree_dispatch/toolchains/nvrtc.py): what nvcc gives
// every .cu file and NVRTC does not.
// The <math.h> macros nvcc's implicit host includes define. NVRTC has no __builtin_inff, so
// they are bit casts: usable in device code, not in constant expressions.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fc00000)
#endif
#ifndef HUGE_VALF
#define HUGE_VALF INFINITY
#endif
#ifndef HUGE_VAL
#define HUGE_VAL __longlong_as_double(0x7ff0000000000000LL)
#endif
// GCC's type-trait builtin __is_same(A, B), which nvcc's host compiler front end accepts in
// device code and NVRTC lacks (variadic, so template arguments with commas pass through).
#if !__has_builtin(__is_same)
namespace iree_dispatch_nvrtc {
// enum constants, not static data members: those would become __device__ variables in the PTX
template <typename A, typename B> struct is_same { enum : bool { value = false }; };
template <typename A> struct is_same<A, A> { enum : bool { value = true }; };
}  // namespace iree_dispatch_nvrtc
#define __is_same(...) (::iree_dispatch_nvrtc::is_same<__VA_ARGS__>::value)
#endif
