"""torch's CPU casts between diffq's dtypes, as pairs `<case>.in` / `<case>.out` where
out = in.to(out.dtype) computed by torch. tests/core/test_casts_vs_torch.cpp checks diffq's
Tensor::to(dtype) against every pair bit for bit.

Writes tests/fixtures/core/casts.safetensors.

Float -> integer casts use in-range values only (out-of-range is undefined behaviour in torch's C++
static_cast and differs between platforms); integer -> integer casts likewise stay in range.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from _common import FIXTURES, deterministic, save_tensors

F = torch.float32


def f(*vals) -> list[float]:
    return [float(v) for v in vals]


def special_values() -> torch.Tensor:
    v: list[float] = []
    v += f(0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 0.1, -0.1, 1 / 3, math.pi, -math.e)
    v += f(math.inf, -math.inf, math.nan, -math.nan)
    # float32 subnormals and the smallest normal (bf16 shares float32's exponent range)
    v += f(2 ** -149, 3 * 2 ** -149, 2 ** -133, 2 ** -127, 2 ** -126 - 2 ** -149, 2 ** -126, 1e-40, -1e-39)
    # bf16 subnormal ties: bf16 min subnormal 2^-133; halfway values around it
    v += f(2 ** -134, 3 * 2 ** -134, 5 * 2 ** -134)
    # float16: subnormals 2^-24 .. (2^10-1) 2^-24, halfway ties, min normal 2^-14
    v += f(2 ** -24, 2 ** -25, 3 * 2 ** -25, 5 * 2 ** -25, 2 ** -26, 2 ** -14, 2 ** -14 - 2 ** -24,
           2 ** -15, 1023 * 2 ** -24, 2047 * 2 ** -25, 6e-8, -6e-8, 1e-8, 5.96e-8, 2.98e-8)
    # float8 e4m3fn: subnormals k*2^-9 (k=1..7), min normal 2^-6, ties at (2k+1)*2^-10
    v += [k * 2.0 ** -9 for k in range(1, 8)] + [(2 * k + 1) * 2.0 ** -10 for k in range(0, 8)]
    v += f(2 ** -6, 2 ** -7, 2 ** -10, 2 ** -11, 0.0009, -0.003)
    # float8 e5m2: subnormals k*2^-16 (k=1..3), min normal 2^-14, ties at (2k+1)*2^-17
    v += [k * 2.0 ** -16 for k in range(1, 4)] + [(2 * k + 1) * 2.0 ** -17 for k in range(0, 4)]
    v += f(2 ** -17, 2 ** -18, 1.5e-5, -3e-5)
    # halfway ties around 1 (and 1.5) for each mantissa width: bf16 7, f16 10, e4m3 3, e5m2 2 bits
    for m in (7, 10, 3, 2):
        u = 2.0 ** -m
        for base in (1.0, 1.5, -1.0, 96.0):
            for k in (0.5, 1.5, 2.5):
                x = base + math.copysign(k * u * abs(base) if base != 96.0 else k * u * 64, base)
                v += f(x, np.nextafter(np.float32(x), np.float32(math.inf)),
                       np.nextafter(np.float32(x), np.float32(-math.inf)))
    # near each format's max
    v += f(448, 449, 447, 464, 463.99, 464.01, 470, 479.9, 480, 496, 500, 512, -448, -464, -480, -500)
    v += f(57344, 57343, 61439, 61440, 61441, 65504, 65519, 65520, 65535, 65536, 65536.1, -57344, -61440,
           -65504, -65520, -70000, 1e5, 1e6)
    v += f(3.3895313892515355e38, 3.3895e38, 3.3961e38, 3.4028234663852886e38, -3.4028234663852886e38, 1e38)
    # large / small
    v += f(1e10, -1e10, 1e20, 1e-20, -1e-30, 1e-38, 123456.789, 0.007, 2 ** 24 + 1, 2 ** 31, 2 ** 63)
    return torch.tensor(v, dtype=F)


def random_values(gen: torch.Generator, n: int = 512) -> torch.Tensor:
    mant = torch.randn(n, generator=gen, dtype=torch.float64)
    expo = torch.randint(-30, 20, (n,), generator=gen).to(torch.float64)
    return (mant * torch.pow(2.0, expo)).to(F)


def main() -> None:
    deterministic(0)
    gen = torch.Generator().manual_seed(20240607)
    out: dict[str, torch.Tensor] = {}

    def case(name: str, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        y = x.to(dtype)
        out[f"{name}.in"] = x
        out[f"{name}.out"] = y
        return y

    floats = torch.cat([special_values(), random_values(gen)])
    names = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float8_e4m3fn: "f8_e4m3fn",
             torch.float8_e5m2: "f8_e5m2"}
    for dt, dn in names.items():
        y = case(f"f32_to_{dn}", floats, dt)
        case(f"{dn}_to_f32", y, F)  # and back
    case("f32_to_bool", floats, torch.bool)
    case("f32_to_f32", floats, F)

    # float -> integer: in-range values with fractions (truncation toward zero), ±0, exact ends
    def ints(lo: float, hi: float, extra: list[float]) -> torch.Tensor:
        r = torch.rand(256, generator=gen, dtype=torch.float64) * (hi - lo) + lo
        return torch.cat([torch.tensor(extra, dtype=torch.float64), r]).to(F)

    frac = [0.0, -0.0, 0.4, -0.4, 0.5, -0.5, 0.9999, -0.9999, 1.5, -1.5, 2.5, -2.5, 7.99, -7.99]
    i8 = case("f32_to_i8", ints(-128.0, 127.0, frac + [-128.0, 127.0, 127.9, -128.9]), torch.int8)
    u8 = case("f32_to_u8", ints(0.0, 255.0, [v for v in frac if v > -1] + [255.0, 255.9, 128.5]), torch.uint8)
    i32 = case("f32_to_i32", ints(-2.0 ** 31, 2.0 ** 31 - 256, frac + [-2.0 ** 31, 2.0 ** 31 - 128, 16777217.0, -123456.78]),
               torch.int32)
    i64 = case("f32_to_i64", ints(-2.0 ** 62, 2.0 ** 62, frac + [-2.0 ** 63, 2.0 ** 62, 1e18, -9.2e18]), torch.int64)
    for dn, y in (("i8", i8), ("u8", u8), ("i32", i32), ("i64", i64)):
        case(f"{dn}_to_f32", y, F)
    case("bool_to_f32", out["f32_to_bool.out"], F)

    # integer -> float rounding (|x| beyond the float's exact range), integer <-> integer in range
    big = torch.tensor([0, 1, -1, 2 ** 24 + 1, 2 ** 24 + 3, -(2 ** 25) - 3, 2 ** 31 - 1, -(2 ** 31),
                        2 ** 53 + 1, 2 ** 60 + 2 ** 36 + 1, 2 ** 60 + 2 ** 36, -(2 ** 60) - 2 ** 36 - 1,
                        2 ** 63 - 1, -(2 ** 63), 65519, 65520, 2049, 2051, 257, 259], dtype=torch.int64)
    big = torch.cat([big, torch.randint(-(2 ** 62), 2 ** 62, (64,), generator=gen, dtype=torch.int64)])
    case("i64_to_f32", big, F)
    case("i64_to_f16", big[(big.abs() < 65520) & (big != -(2 ** 63))], torch.float16)
    case("i64_to_bf16", big, torch.bfloat16)
    i32s = torch.cat([torch.tensor([0, 1, -1, 2 ** 24 + 1, 2 ** 31 - 1, -(2 ** 31), 16777219, 255, -128],
                                   dtype=torch.int32),
                      torch.randint(-(2 ** 31), 2 ** 31 - 1, (64,), generator=gen, dtype=torch.int32)])
    case("i32_to_f32", i32s, F)
    case("i32_to_bf16", i32s, torch.bfloat16)
    case("i32_to_i64", i32s, torch.int64)
    case("i64_to_i32", i32s.to(torch.int64), torch.int32)
    small = torch.arange(-128, 128, dtype=torch.int32)
    case("i32_to_i8", small, torch.int8)
    case("i8_to_i32", small.to(torch.int8), torch.int32)
    case("i8_to_i64", small.to(torch.int8), torch.int64)
    case("i32_to_u8", torch.arange(0, 256, dtype=torch.int32), torch.uint8)
    case("u8_to_i64", torch.arange(0, 256, dtype=torch.int32).to(torch.uint8), torch.int64)
    case("u8_to_bf16", torch.arange(0, 256, dtype=torch.int32).to(torch.uint8), torch.bfloat16)
    case("i32_to_bool", torch.tensor([0, 1, -1, 2, 256, -(2 ** 31)], dtype=torch.int32), torch.bool)
    case("bool_to_i64", torch.tensor([True, False, True]), torch.int64)
    case("bool_to_bf16", torch.tensor([True, False, True]), torch.bfloat16)

    # every bit pattern of the 16/8-bit floats -> float32 (NaN payloads included)
    all16 = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    case("all_f16_to_f32", all16.view(torch.float16), F)
    case("all_bf16_to_f32", all16.view(torch.bfloat16), F)
    all8 = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    case("all_f8_e4m3fn_to_f32", all8.view(torch.float8_e4m3fn), F)
    case("all_f8_e5m2_to_f32", all8.view(torch.float8_e5m2), F)

    # casts between the narrow floats (torch goes through float32)
    bf = out["f32_to_bf16.out"]
    hf = out["f32_to_f16.out"]
    case("bf16_to_f16", bf, torch.float16)
    case("f16_to_bf16", hf, torch.bfloat16)
    case("bf16_to_f8_e4m3fn", bf, torch.float8_e4m3fn)
    case("f16_to_f8_e5m2", hf, torch.float8_e5m2)
    case("f16_to_f8_e4m3fn", hf, torch.float8_e4m3fn)
    case("f8_e4m3fn_to_bf16", out["f32_to_f8_e4m3fn.out"], torch.bfloat16)
    case("f8_e5m2_to_f16", out["f32_to_f8_e5m2.out"], torch.float16)
    case("bf16_to_bool", bf, torch.bool)

    dst = FIXTURES / "core"
    dst.mkdir(parents=True, exist_ok=True)
    save_tensors(dst / "casts.safetensors", out,
                 metadata={"generator": "tools/reference/make_dtype_fixtures.py",
                           "torch": torch.__version__.split("+")[0],
                           "layout": "<case>.in and <case>.out, out = torch in.to(out.dtype)"})
    print(f"[casts] {len(out) // 2} cases, {(dst / 'casts.safetensors').stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
