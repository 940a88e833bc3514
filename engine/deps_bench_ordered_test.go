package engine

import "testing"

// The same benchmarks under Worker(order_hazards=True).

func BenchmarkWireOrdered(b *testing.B) { benchWire(b, Config{OrderHazards: true}) }

func BenchmarkDispatchOrdered(b *testing.B) { benchDispatch(b, Config{OrderHazards: true}) }
