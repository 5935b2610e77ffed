// Machine facts for records: the CPU summary that tells apart machines reporting one generic model name.
#include <gtest/gtest.h>

#include <string>

#include "harness/measure/machine.h"

namespace {

std::string x86(const std::string& family, const std::string& model, const std::string& flags) {
  // Two processors, as /proc/cpuinfo lists them; the first one's fields are read.
  std::string one = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: " + family + "\nmodel\t\t: " + model +
                    "\nmodel name\t: AMD EPYC\nflags\t\t: " + flags + "\n\n";
  return one + one;
}

}  // namespace

TEST(Machine, CpuSummaryTellsApartCpusOfOneName) {
  const std::string zen3 = "fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2";
  EXPECT_EQ(sb::cpu_summary_from(x86("25", "1", zen3)), "AMD EPYC (family 25 model 1, AVX2)");
  EXPECT_EQ(sb::cpu_summary_from(x86("25", "17", zen3 + " avx512f avx512bw avx512vl avx512_bf16")),
            "AMD EPYC (family 25 model 17, AVX-512)");
  EXPECT_EQ(sb::cpu_summary_from(x86("6", "85", "sse2 sse4_1 sse4_2 avx")), "AMD EPYC (family 6 model 85, AVX)");
  // "avx512_bf16" alone is not avx512f, and "avx2" is not "avx": whole words only.
  EXPECT_EQ(sb::cpu_summary_from(x86("25", "17", "sse2 sse4_2 avx2 avx512_bf16")),
            "AMD EPYC (family 25 model 17, AVX2)");
}

TEST(Machine, CpuSummaryOnArmAndWithoutFacts) {
  const std::string arm = "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm aes sve\n"
                          "CPU implementer\t: 0x41\nCPU part\t: 0xd40\n";
  EXPECT_EQ(sb::cpu_summary_from(arm), "unknown (SVE)");  // ARM kernels report no model name
  EXPECT_EQ(sb::cpu_summary_from("processor\t: 0\nFeatures\t: fp asimd\nmodel name\t: Neoverse\n"),
            "Neoverse (NEON)");
  EXPECT_EQ(sb::cpu_summary_from(""), "unknown");
  EXPECT_EQ(sb::cpu_summary_from("model name\t: Some CPU\n"), "Some CPU");
  // The running machine gives one too.
  EXPECT_FALSE(sb::cpu_summary().empty());
}
