#include "jit/cubin_elf.hpp"

#include <cstdint>
#include <cstring>

#include "core/util.hpp"

namespace dsa_indexer::detail {
namespace {

// ELF64 constants (elf.h names), spelled out so that the check needs no system header.
constexpr unsigned kEmCuda = 190;
constexpr unsigned kEtExec = 2;
constexpr unsigned kShtSymtab = 2, kShtStrtab = 3, kShtNobits = 8, kShtProgbits = 1;
constexpr uint64_t kShfExecinstr = 0x4;
constexpr unsigned kSttFunc = 2;
constexpr std::size_t kEhdr = 64, kShdr = 64, kPhdr = 56, kSym = 24;

template <class T>
T rd(const std::string& b, std::size_t off) {
  T v{};
  std::memcpy(&v, b.data() + off, sizeof v);  // little-endian host (x86-64, aarch64)
  return v;
}

struct Section {
  uint32_t type = 0;
  uint64_t flags = 0, offset = 0, size = 0, entsize = 0;
  uint32_t link = 0;
};

}  // namespace

int arch_sm(const std::string& arch) {
  if (arch.compare(0, 3, "sm_") != 0) return -1;
  int sm = 0;
  std::size_t i = 3;
  for (; i < arch.size() && arch[i] >= '0' && arch[i] <= '9' && i < 7; ++i) sm = sm * 10 + (arch[i] - '0');
  if (i == 3 || (i < arch.size() && arch.substr(i) != "a" && arch.substr(i) != "f")) return -1;
  return sm;
}

std::string cubin_problem(const std::string& cubin, const std::vector<std::string>& kernels, const std::string& arch) {
  if (cubin.size() < kEhdr || cubin.compare(0, 4, "\x7f" "ELF") != 0) return "cubin is not an ELF file";
  if (cubin[4] != 2 || cubin[5] != 1) return "cubin is not a 64-bit little-endian ELF";
  const unsigned machine = rd<uint16_t>(cubin, 18);
  if (machine != kEmCuda) return fmt::format("cubin ELF machine is {}, expected 190 (EM_CUDA)", machine);
  if (rd<uint16_t>(cubin, 16) != kEtExec) return "cubin is not an executable ELF (e_type)";
  // EF_CUDA_SM: bits 8-15 from ELF ABI version 8 (NVRTC 12.8+, 13.x), bits 0-7 before. NVRTC
  // 13.0 writes the same e_flags for sm_90 and sm_90a (measured), so the suffix is not checked.
  const uint32_t flags = rd<uint32_t>(cubin, 48);
  const int sm = static_cast<unsigned char>(cubin[8]) >= 8 ? static_cast<int>((flags >> 8) & 0xff) : static_cast<int>(flags & 0xff);
  const int want = arch_sm(arch);
  if (want < 0) return fmt::format("unknown arch '{}'", arch);
  if (sm != want) return fmt::format("cubin is for sm_{}, expected {} (e_flags {:#x})", sm, arch, flags);

  const uint64_t shoff = rd<uint64_t>(cubin, 40);
  const unsigned shentsize = rd<uint16_t>(cubin, 58), shnum = rd<uint16_t>(cubin, 60);
  if (shentsize != kShdr || shnum < 2 || shoff > cubin.size() || (cubin.size() - shoff) / kShdr < shnum)
    return "cubin section header table is missing or outside the file";
  // The program headers (what the driver loads) must lie inside the file too.
  const uint64_t phoff = rd<uint64_t>(cubin, 32);
  const unsigned phentsize = rd<uint16_t>(cubin, 54), phnum = rd<uint16_t>(cubin, 56);
  if (phnum != 0 && (phentsize != kPhdr || phoff > cubin.size() || (cubin.size() - phoff) / kPhdr < phnum))
    return "cubin program header table lies outside the file";
  std::vector<Section> sec(shnum);
  for (unsigned i = 0; i < shnum; ++i) {
    const std::size_t o = static_cast<std::size_t>(shoff) + std::size_t(i) * kShdr;
    Section& s = sec[i];
    s.type = rd<uint32_t>(cubin, o + 4);
    s.flags = rd<uint64_t>(cubin, o + 8);
    s.offset = rd<uint64_t>(cubin, o + 24);
    s.size = rd<uint64_t>(cubin, o + 32);
    s.link = rd<uint32_t>(cubin, o + 40);
    s.entsize = rd<uint64_t>(cubin, o + 56);
    if (s.type != kShtNobits && (s.offset > cubin.size() || s.size > cubin.size() - s.offset))
      return fmt::format("cubin section {} lies outside the file", i);
  }
  const Section* symtab = nullptr;
  for (const auto& s : sec)
    if (s.type == kShtSymtab) symtab = &s;
  if (!symtab || symtab->entsize != kSym || symtab->link >= shnum || sec[symtab->link].type != kShtStrtab)
    return "cubin has no symbol table";
  const Section& strtab = sec[symtab->link];
  for (const auto& k : kernels) {
    bool found = false;
    for (uint64_t off = symtab->offset; off + kSym <= symtab->offset + symtab->size && !found; off += kSym) {
      const uint32_t name = rd<uint32_t>(cubin, off);
      const unsigned char info = static_cast<unsigned char>(cubin[off + 4]);
      const unsigned shndx = rd<uint16_t>(cubin, off + 6);
      if (name >= strtab.size || strtab.size - name <= k.size()) continue;
      const char* s = cubin.data() + strtab.offset + name;
      if (std::memcmp(s, k.data(), k.size()) != 0 || s[k.size()] != '\0') continue;
      if ((info & 0xf) != kSttFunc || shndx == 0 || shndx >= shnum)
        return fmt::format("cubin symbol {} is not a defined function", k);
      const Section& code = sec[shndx];
      if (code.type != kShtProgbits || !(code.flags & kShfExecinstr) || code.size == 0)
        return fmt::format("cubin symbol {} is not in an executable section", k);
      found = true;
    }
    if (!found) return fmt::format("cubin has no kernel {} (the header names it)", k);
  }
  return {};
}

}  // namespace dsa_indexer::detail
