# simpler: build, run the main example, test, benchmark.
GO      ?= go
BIN     := bin/simpler
PLATFORM ?= a2a3sim

.PHONY: build demo test fuzz bench clean

build:
	$(GO) build -o $(BIN) ./cmd/simpler

# The main example on the default simulated platform, then what it did and
# where to go next.
demo: build
	$(BIN) run --platform $(PLATFORM) scripts/examples/multi_chip_dispatch.star
	@echo "demo: two simulated $(PLATFORM) chips each added two 1024-element vectors, and a SUB task that waited for both checked every element."
	@echo "next: docs/guide.md explains the script line by line; $(BIN) repl gives you a live Worker to try things on."

# Every test: vet, formatting, a short run of every fuzz target, then the
# whole suite under the race detector (golden scripts in both modes, real
# daemons on 127.0.0.1, and the leak checks each package's TestMain runs).
# The worker-group tests use Open MPI's mpirun; without it (and outside
# CI, where it is required: internal/mpitest) they start their ranks
# themselves, and the last line says that mpirun went untested (go test
# shows a passing package's own warnings only with -v). The same for
# Slurm, which TestSlurmDeploy starts on this host (internal/slurmtest).
test:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(MAKE) fuzz FUZZTIME=20000x
	$(GO) test -race -count=1 ./...
	@command -v mpirun >/dev/null 2>&1 || printf '\n!!! make test passed WITHOUT mpirun (Open MPI): the mpirun launcher of worker groups went UNTESTED\n!!! (their tests started the ranks themselves; scripts/examples/mpirun_group.star was not run).\n!!! Install openmpi-bin to test it; CI (.ci/run) installs it and fails without it.\n\n'
	@for p in munged slurmctld slurmd slurmstepd sinfo squeue scancel srun sbatch; do PATH="$$PATH:/usr/sbin" command -v $$p >/dev/null 2>&1 || { printf '\n!!! make test passed WITHOUT Slurm (no %s): the srun launcher of worker groups went UNTESTED under a real Slurm\n!!! (TestSlurmDeploy checked nothing; TestDeployFilesRun ran deploy/slurm with a stand-in srun).\n!!! Install slurmctld slurmd slurm-client munge to test it; CI (.ci/run) installs them and fails without them.\n\n' $$p; break; }; done

# Every fuzz target of every package, briefly (longer: make fuzz
# FUZZTIME=1m; make test runs a fixed number of inputs, so load cannot make
# it fail). scripts/fuzz.sh finds the targets with go test -list.
FUZZTIME ?= 10s
fuzz:
	@GO='$(GO)' FUZZTIME='$(FUZZTIME)' sh scripts/fuzz.sh

bench: build
	$(GO) run ./cmd/simpler bench

clean:
	rm -rf bin
