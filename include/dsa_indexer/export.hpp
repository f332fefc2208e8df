#pragma once
/* Symbols of the public API are the only ones the shared library exports. C89-clean: c_api.h
 * includes it. */
#if defined(_WIN32)
#define DSA_INDEXER_API
#else
#define DSA_INDEXER_API __attribute__((visibility("default")))
#endif
