"""`dtype=auto`: bf16 only where it is native. Emulated bf16 on an AVX2-only CPU prefilled 5x slower."""

from __future__ import annotations

import torch

from core.modelload import cpu_has_native_bf16, native_bf16, pick_dtype

# The flags line of the AVX2-only AMD EPYC where emulated bf16 prefilled 5x slower than fp32.
EPYC_AVX2 = (
    "processor\t: 0\nmodel name\t: AMD EPYC\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
    "sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc "
    "cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 x2apic movbe popcnt "
    "tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a "
    "misalignsse 3dnowprefetch osvw topoext ssbd ibpb vmmcall fsgsbase tsc_adjust bmi1 avx2 smep bmi2 rdseed "
    "adx smap clflushopt sha_ni xsaveopt xsavec xgetbv1 clzero xsaveerptr virt_ssbd arat\n"
)
# Excerpts: a Sapphire Rapids Xeon (AMX and AVX512-BF16), a Skylake Xeon (AVX-512 but no bf16), and
# an Arm Neoverse V1 (`Features`, with the BF16 extension).
SAPPHIRE_RAPIDS = "flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8\n"
SKYLAKE = "flags\t\t: fpu sse2 avx2 avx512f avx512dq avx512cd avx512bw avx512vl\n"
NEOVERSE_V1 = (
    "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp i8mm bf16 sve\n"
)


def test_native_bf16_reads_the_cpu_flags() -> None:
    assert not native_bf16(EPYC_AVX2)
    assert not native_bf16(SKYLAKE)
    assert native_bf16(SAPPHIRE_RAPIDS)
    assert native_bf16(NEOVERSE_V1)
    assert not native_bf16("")
    # a flag's name inside another line's value is not a flag
    assert not native_bf16("model name\t: bf16 avx512_bf16 test rig\nflags\t\t: fpu avx2\n")


def test_auto_is_bf16_on_cuda_and_fp32_on_a_cpu_without_native_bf16() -> None:
    assert pick_dtype("auto", "cuda") is torch.bfloat16
    assert pick_dtype("auto", "cuda:1") is torch.bfloat16
    assert pick_dtype("auto", "cpu") is (torch.bfloat16 if cpu_has_native_bf16() else torch.float32)
    assert pick_dtype("auto", "mps") is torch.float32
    assert pick_dtype("float32", "cuda") is torch.float32  # an explicit dtype is kept
    assert pick_dtype("bfloat16", "cpu") is torch.bfloat16
