#pragma once
// Structural check of a cubin before the disk cache trusts it: a CUDA ELF for the expected SM
// whose symbol table defines every expected kernel as a function in an executable section.
// It catches damage, a cubin built for another target and a "fake" that merely contains the
// kernel's name; it does not prove the code is the code of the key (docs/RELIABILITY.md,
// threat model: the cache directory's owner can always plant a cubin).
#include <string>
#include <vector>

namespace dsa_indexer::detail {

// The SM number of an "sm_90a"-style arch (90), or -1 when `arch` is not of that form.
int arch_sm(const std::string& arch);

// "" when `cubin` is a 64-bit little-endian EM_CUDA executable ELF for `arch`'s SM whose
// sections lie inside the file and whose .symtab defines each name in `kernels` as a function
// symbol of a non-empty executable section; otherwise what is wrong with it.
std::string cubin_problem(const std::string& cubin, const std::vector<std::string>& kernels,
                          const std::string& arch = "sm_90a");

}  // namespace dsa_indexer::detail
