package inplace

// The typed loops behind foldT: d = a op b (op c (op e)), elementwise,
// eight elements per step through array pointers (one length check per
// step instead of one per element, and room for the compiler to keep the
// loads in flight), then the tail. Every function is the same loop with
// another operator or arity.

// number is every element type the loops work on directly.
type number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32
}

func fold2[T number](op Op, d, a, b []T) {
	switch op {
	case Sum:
		sum2(d, a, b)
	case Max:
		max2(d, a, b)
	case Min:
		min2(d, a, b)
	}
}

func fold3[T number](op Op, d, a, b, c []T) {
	switch op {
	case Sum:
		sum3(d, a, b, c)
	case Max:
		max3(d, a, b, c)
	case Min:
		min3(d, a, b, c)
	}
}

func fold4[T number](op Op, d, a, b, c, e []T) {
	switch op {
	case Sum:
		sum4(d, a, b, c, e)
	case Max:
		max4(d, a, b, c, e)
	case Min:
		min4(d, a, b, c, e)
	}
}

func sum2[T number](d, a, b []T) {
	n := len(d)
	a, b = a[:n], b[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		d8, a8, b8 := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:])
		d8[0] = a8[0] + b8[0]
		d8[1] = a8[1] + b8[1]
		d8[2] = a8[2] + b8[2]
		d8[3] = a8[3] + b8[3]
		d8[4] = a8[4] + b8[4]
		d8[5] = a8[5] + b8[5]
		d8[6] = a8[6] + b8[6]
		d8[7] = a8[7] + b8[7]
	}
	for ; i < n; i++ {
		d[i] = a[i] + b[i]
	}
}

func max2[T number](d, a, b []T) {
	n := len(d)
	a, b = a[:n], b[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		d8, a8, b8 := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:])
		d8[0] = max(a8[0], b8[0])
		d8[1] = max(a8[1], b8[1])
		d8[2] = max(a8[2], b8[2])
		d8[3] = max(a8[3], b8[3])
		d8[4] = max(a8[4], b8[4])
		d8[5] = max(a8[5], b8[5])
		d8[6] = max(a8[6], b8[6])
		d8[7] = max(a8[7], b8[7])
	}
	for ; i < n; i++ {
		d[i] = max(a[i], b[i])
	}
}

func min2[T number](d, a, b []T) {
	n := len(d)
	a, b = a[:n], b[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		d8, a8, b8 := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:])
		d8[0] = min(a8[0], b8[0])
		d8[1] = min(a8[1], b8[1])
		d8[2] = min(a8[2], b8[2])
		d8[3] = min(a8[3], b8[3])
		d8[4] = min(a8[4], b8[4])
		d8[5] = min(a8[5], b8[5])
		d8[6] = min(a8[6], b8[6])
		d8[7] = min(a8[7], b8[7])
	}
	for ; i < n; i++ {
		d[i] = min(a[i], b[i])
	}
}

func sum3[T number](d, a, b, c []T) {
	n := len(d)
	a, b, c = a[:n], b[:n], c[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		d8, a8, b8, c8 := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:]), (*[8]T)(c[i:])
		d8[0] = a8[0] + b8[0] + c8[0]
		d8[1] = a8[1] + b8[1] + c8[1]
		d8[2] = a8[2] + b8[2] + c8[2]
		d8[3] = a8[3] + b8[3] + c8[3]
		d8[4] = a8[4] + b8[4] + c8[4]
		d8[5] = a8[5] + b8[5] + c8[5]
		d8[6] = a8[6] + b8[6] + c8[6]
		d8[7] = a8[7] + b8[7] + c8[7]
	}
	for ; i < n; i++ {
		d[i] = a[i] + b[i] + c[i]
	}
}

func max3[T number](d, a, b, c []T) {
	n := len(d)
	a, b, c = a[:n], b[:n], c[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		d8, a8, b8, c8 := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:]), (*[8]T)(c[i:])
		d8[0] = max(a8[0], b8[0], c8[0])
		d8[1] = max(a8[1], b8[1], c8[1])
		d8[2] = max(a8[2], b8[2], c8[2])
		d8[3] = max(a8[3], b8[3], c8[3])
		d8[4] = max(a8[4], b8[4], c8[4])
		d8[5] = max(a8[5], b8[5], c8[5])
		d8[6] = max(a8[6], b8[6], c8[6])
		d8[7] = max(a8[7], b8[7], c8[7])
	}
	for ; i < n; i++ {
		d[i] = max(a[i], b[i], c[i])
	}
}

func min3[T number](d, a, b, c []T) {
	n := len(d)
	a, b, c = a[:n], b[:n], c[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		d8, a8, b8, c8 := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:]), (*[8]T)(c[i:])
		d8[0] = min(a8[0], b8[0], c8[0])
		d8[1] = min(a8[1], b8[1], c8[1])
		d8[2] = min(a8[2], b8[2], c8[2])
		d8[3] = min(a8[3], b8[3], c8[3])
		d8[4] = min(a8[4], b8[4], c8[4])
		d8[5] = min(a8[5], b8[5], c8[5])
		d8[6] = min(a8[6], b8[6], c8[6])
		d8[7] = min(a8[7], b8[7], c8[7])
	}
	for ; i < n; i++ {
		d[i] = min(a[i], b[i], c[i])
	}
}

func sum4[T number](d, a, b, c, e []T) {
	n := len(d)
	a, b, c, e = a[:n], b[:n], c[:n], e[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		d8, a8, b8, c8, e8 := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:]), (*[8]T)(c[i:]), (*[8]T)(e[i:])
		d8[0] = a8[0] + b8[0] + c8[0] + e8[0]
		d8[1] = a8[1] + b8[1] + c8[1] + e8[1]
		d8[2] = a8[2] + b8[2] + c8[2] + e8[2]
		d8[3] = a8[3] + b8[3] + c8[3] + e8[3]
		d8[4] = a8[4] + b8[4] + c8[4] + e8[4]
		d8[5] = a8[5] + b8[5] + c8[5] + e8[5]
		d8[6] = a8[6] + b8[6] + c8[6] + e8[6]
		d8[7] = a8[7] + b8[7] + c8[7] + e8[7]
	}
	for ; i < n; i++ {
		d[i] = a[i] + b[i] + c[i] + e[i]
	}
}

func max4[T number](d, a, b, c, e []T) {
	n := len(d)
	a, b, c, e = a[:n], b[:n], c[:n], e[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		d8, a8, b8, c8, e8 := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:]), (*[8]T)(c[i:]), (*[8]T)(e[i:])
		d8[0] = max(a8[0], b8[0], c8[0], e8[0])
		d8[1] = max(a8[1], b8[1], c8[1], e8[1])
		d8[2] = max(a8[2], b8[2], c8[2], e8[2])
		d8[3] = max(a8[3], b8[3], c8[3], e8[3])
		d8[4] = max(a8[4], b8[4], c8[4], e8[4])
		d8[5] = max(a8[5], b8[5], c8[5], e8[5])
		d8[6] = max(a8[6], b8[6], c8[6], e8[6])
		d8[7] = max(a8[7], b8[7], c8[7], e8[7])
	}
	for ; i < n; i++ {
		d[i] = max(a[i], b[i], c[i], e[i])
	}
}

func min4[T number](d, a, b, c, e []T) {
	n := len(d)
	a, b, c, e = a[:n], b[:n], c[:n], e[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		d8, a8, b8, c8, e8 := (*[8]T)(d[i:]), (*[8]T)(a[i:]), (*[8]T)(b[i:]), (*[8]T)(c[i:]), (*[8]T)(e[i:])
		d8[0] = min(a8[0], b8[0], c8[0], e8[0])
		d8[1] = min(a8[1], b8[1], c8[1], e8[1])
		d8[2] = min(a8[2], b8[2], c8[2], e8[2])
		d8[3] = min(a8[3], b8[3], c8[3], e8[3])
		d8[4] = min(a8[4], b8[4], c8[4], e8[4])
		d8[5] = min(a8[5], b8[5], c8[5], e8[5])
		d8[6] = min(a8[6], b8[6], c8[6], e8[6])
		d8[7] = min(a8[7], b8[7], c8[7], e8[7])
	}
	for ; i < n; i++ {
		d[i] = min(a[i], b[i], c[i], e[i])
	}
}
