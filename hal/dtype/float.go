package dtype

import "math"

// FloatToHalf converts f to IEEE 754 binary16, rounding to nearest even.
func FloatToHalf(f float32) uint16 {
	x := math.Float32bits(f)
	sign := uint16(x>>16) & 0x8000
	exp := int((x >> 23) & 0xff)
	mant := x & 0x7fffff
	if exp == 0xff { // inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		half := uint16(mant >> shift)
		rem := mant & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | half
	}
	half := uint16(e)<<10 | uint16(mant>>13)
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // may carry into the exponent, which is the right answer
	}
	return sign | half
}

// HalfToFloat converts IEEE 754 binary16 bits to float32.
func HalfToFloat(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		for mant&0x400 == 0 {
			mant <<= 1
			exp--
		}
		exp++
		mant &= 0x3ff
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// FloatToBF16 converts f to bfloat16, rounding to nearest even.
func FloatToBF16(f float32) uint16 {
	x := math.Float32bits(f)
	if x&0x7fffffff > 0x7f800000 {
		return uint16(x>>16) | 0x40
	}
	x += 0x7fff + (x>>16)&1
	return uint16(x >> 16)
}

// e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa; no infinity, max 448.
func e4m3ToFloat(b byte) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	exp := int(b>>3) & 0xf
	mant := float32(b & 7)
	if exp == 0xf && b&7 == 7 {
		return float32(math.NaN())
	}
	if exp == 0 {
		return sign * mant / 8 * float32(math.Ldexp(1, -6))
	}
	return sign * (1 + mant/8) * float32(math.Ldexp(1, exp-7))
}

func floatToE4M3(f float32) byte { return nearest(f, e4m3ToFloat, 0x7e) }

func floatToE5M2(f float32) byte {
	h := FloatToHalf(f)
	// Round the low byte of the half away, to nearest even.
	rem := h & 0xff
	top := h >> 8
	if (h>>10)&0x1f != 0x1f && (rem > 0x80 || (rem == 0x80 && top&1 == 1)) {
		top++
	}
	return byte(top)
}

// e2m1: 1 sign, 2 exponent (bias 1), 1 mantissa: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
func e2m1ToFloat(b byte) float32 {
	vals := [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	v := vals[b&7]
	if b&8 != 0 {
		return -v
	}
	return v
}

func floatToE2M1(f float32) byte { return nearest(f, e2m1ToFloat, 0x07) }

// nearest finds the code whose value is closest to f among the
// non-negative codes 0..maxCode, ties to the even code; the sign bit is the
// top bit of the format (0x80 for 8-bit kinds, 0x08 for 4-bit ones).
func nearest(f float32, decode func(byte) float32, maxCode byte) byte {
	var signBit byte = 0x80
	if maxCode < 0x10 {
		signBit = 0x08
	}
	if f != f {
		return maxCode | signBit
	}
	var sign byte
	if f < 0 {
		sign, f = signBit, -f
	}
	best, bestDiff := byte(0), float32(math.Inf(1))
	for c := byte(0); c <= maxCode; c++ {
		d := decode(c) - f
		if d < 0 {
			d = -d
		}
		if d < bestDiff || (d == bestDiff && c&1 == 0) {
			best, bestDiff = c, d
		}
	}
	return sign | best
}
