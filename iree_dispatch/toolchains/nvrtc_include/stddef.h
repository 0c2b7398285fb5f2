// <stddef.h> for NVRTC (iree_dispatch/toolchains/nvrtc.py). NVRTC itself declares size_t and ptrdiff_t
// (LP64: unsigned long, long) and NULL.
#ifndef IREE_DISPATCH_NVRTC_STDDEF_H
#define IREE_DISPATCH_NVRTC_STDDEF_H
#ifndef offsetof
// NVRTC has no __builtin_offsetof; EDG's __INTADDR__ keeps this a constant expression.
#define offsetof(type, member) ((size_t)__INTADDR__(&((type*)0)->member))
#endif
#endif
