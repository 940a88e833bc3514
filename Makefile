# simpler: build, run the main example, test, benchmark.
GO      ?= go
BIN     := bin/simpler
PLATFORM ?= a2a3sim

.PHONY: build demo test bench vet fmt clean

build:
	$(GO) build -o $(BIN) ./cmd/simpler

# The main example on the default simulated platform.
demo: build
	$(BIN) run --platform $(PLATFORM) scripts/examples/multi_chip_dispatch.star

# Every test: vet, formatting, the race detector, and the leak checks each
# package's TestMain runs.
test:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) test -race -count=1 ./...

bench: build
	$(GO) run ./cmd/simpler bench

clean:
	rm -rf bin
