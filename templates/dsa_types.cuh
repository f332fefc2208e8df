#pragma once
// Fixed-width types for code that NVRTC compiles with no include path (no <cstdint>) and that
// the host also includes (dsa_args.cuh).
#if defined(__CUDACC_RTC__)
typedef signed char i8;
typedef unsigned char u8;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned short u16;
#else
#include <cstdint>
typedef int8_t i8;
typedef uint8_t u8;
typedef int32_t i32;
typedef uint32_t u32;
typedef int64_t i64;
typedef uint64_t u64;
typedef uint16_t u16;
#endif
// A function both the host and the kernels call (NVRTC compiles no host functions).
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define DSA_HOST_DEVICE __host__ __device__
#else
#define DSA_HOST_DEVICE
#endif
