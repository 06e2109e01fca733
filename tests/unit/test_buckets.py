import pytest

from bcgprof.buckets import (
    default_bucket_spec,
    parse_buckets,
    sglang_decode_buckets,
    sglang_prefill_buckets,
)
from bcgprof.errors import BucketSpecError

# SGLang's default piecewise prefill token buckets up to 16384, written out by hand.
PREFILL_16384 = (
    [4, 8, 12, 16, 20, 24, 28, 32]
    + [48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256]
    + [288, 320, 352, 384, 416, 448, 480, 512]
    + [576, 640, 704, 768, 832, 896, 960, 1024]
    + [1280, 1536, 1792, 2048, 2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096]
    + [
        4608,
        5120,
        5632,
        6144,
        6656,
        7168,
        7680,
        8192,
        8704,
        9216,
        9728,
        10240,
        10752,
        11264,
        11776,
        12288,
        12800,
        13312,
        13824,
        14336,
        14848,
        15360,
        15872,
        16384,
    ]
)
DECODE_256 = [1, 2, 4, 8, 12] + [16 + 8 * i for i in range(31)]


def test_prefill_preset_is_sglangs_74_buckets_at_16384():
    assert parse_buckets("sglang-prefill") == PREFILL_16384
    assert len(PREFILL_16384) == 74


def test_prefill_preset_is_capped_by_max_tokens():
    assert parse_buckets("sglang-prefill", max_tokens=8192) == [
        b for b in PREFILL_16384 if b <= 8192
    ]
    assert parse_buckets("sglang-prefill", max_tokens=100) == [
        4,
        8,
        12,
        16,
        20,
        24,
        28,
        32,
        48,
        64,
        80,
        96,
    ]
    # Above 16384 the 512-step run goes on.
    assert sglang_prefill_buckets(17000)[-2:] == [16384, 16896]


def test_decode_preset_is_sglangs_batch_sizes():
    assert parse_buckets("sglang-decode") == DECODE_256
    assert len(DECODE_256) == 36
    assert sglang_decode_buckets(512)[36:] == [272 + 16 * i for i in range(15)] + [512]
    assert sglang_decode_buckets(600)[-3:] == [512, 544, 576]
    assert parse_buckets("sglang-decode", max_bs=10) == [1, 2, 4, 8]


def test_default_spec_per_phase():
    assert default_bucket_spec("prefill") == "sglang-prefill"
    assert default_bucket_spec("decode") == "sglang-decode"
    with pytest.raises(BucketSpecError, match="unknown phase 'train'"):
        default_bucket_spec("train")


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("4,8,16", [4, 8, 16]),
        ("16, 4 ,8", [4, 8, 16]),
        ("512:4096:512", [512, 1024, 1536, 2048, 2560, 3072, 3584, 4096]),
        ("1:4", [1, 2, 3, 4]),
        ("100:350:100", [100, 200, 300]),  # the stop is included only when on the grid
        ("4,8,512:1024:256", [4, 8, 512, 768, 1024]),
        ("SGLANG-DECODE", DECODE_256),
        ("7", [7]),
    ],
)
def test_lists_and_ranges(spec, expected):
    assert parse_buckets(spec) == expected


def test_explicit_sizes_are_not_capped():
    assert parse_buckets("32768", max_tokens=16384) == [32768]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("4,0,8", "entry '0' must be a positive integer"),
        ("4,-8", "entry '-8' must be a positive integer"),
        ("4,8,4", "bucket 4 appears twice"),
        ("4:16:4,8", "bucket 8 appears twice (entries '4:16:4' and '8')"),
        ("sglang-prefill,16", "bucket 16 appears twice (entries 'sglang-prefill' and '16')"),
        ("4,eight", "entry 'eight' is not an integer"),
        ("4.5", "entry '4.5' is not an integer"),
        ("4,,8", "has an empty entry"),
        ("", "empty bucket spec"),
        ("512:256:64", "range '512:256:64' stops (256) before it starts (512)"),
        ("1:2:3:4", "range '1:2:3:4' must be START:STOP or START:STOP:STEP"),
        ("512:4096:0", "entry '512:4096:0' must be a positive integer"),
        ("sglang-prefil", "entry 'sglang-prefil' is not an integer"),
    ],
)
def test_bad_specs_name_the_entry(spec, message):
    with pytest.raises(BucketSpecError) as e:
        parse_buckets(spec)
    assert message in str(e.value)


def test_preset_emptied_by_its_cap_is_an_error():
    with pytest.raises(BucketSpecError, match="preset 'sglang-prefill' is empty"):
        parse_buckets("sglang-prefill", max_tokens=3)


def test_bucket_errors_exit_with_code_2():
    assert BucketSpecError.exit_code == 2
