# Makefile: the whole mt build, non-recursive, out of tree into build/.
#   make            programs and library (installs nothing; names missing packages)
#   make check      all tests (the README's test command)
#   make demo       build + run the pipeline on a corpus that needs no download
#   make deps       install the Debian packages   make install PREFIX=/usr/local
#   make bench      side-by-side benchmarks (bench/)    make asan      all tests under ASan/UBSan
#   make soak       long randomized runs (MT_SOAK=1)    make mutants   planted bugs the tests must catch
#   make kill-soak  tests/pipeline/kill.sh with KILL_ROUNDS (default 200) training kills
# Sources are found by wildcard: a new libcommon/<sub>/*.c, kernels/cpu/*.c, cmd/mt-*.c or tests/unit/test_*.c
# needs no edit here.

# One compilation per CPU unless -j is given (GNU make >= 4.3 takes -j from MAKEFLAGS set here): the CUDA
# objects alone take minutes one at a time. The scripts the targets run (tests/run, share/demo.sh) get an
# empty MAKEFLAGS: a make they start is not a sub-make of this one and cannot use its job server.
ifeq ($(MAKELEVEL)$(filter -j% --jobserver%,$(MAKEFLAGS)),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

PREFIX  ?= /usr/local
B       := build
CC      ?= cc
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
MT_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -pthread -fopenmp -Ilibcommon -Ikernels -MMD -MP \
             $(shell pkg-config --cflags libzstd jansson openblas libutf8proc 2>/dev/null) \
             $(shell pkg-config --cflags pmix ompi-c 2>/dev/null)
LDLIBS  := $(shell pkg-config --libs libzstd jansson openblas libutf8proc 2>/dev/null || \
             echo -lzstd -ljansson -lopenblas -lutf8proc) \
           $(shell pkg-config --libs pmix ompi-c 2>/dev/null || echo -lpmix -lmpi) \
           -ldnnl -lm -pthread -fopenmp
# the libraries without the CUDA ones added below (the programs for valgrind)
HOST_LDLIBS := $(LDLIBS)
# libmicrohttpd: the HTTP server of libcommon/serve, linked into mt-serve only (the other programs take
# nothing of serve/ from libmt.a)
MHD_CFLAGS := $(shell pkg-config --cflags libmicrohttpd 2>/dev/null)
MHD_LIBS   := $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
$(B)/obj/libcommon/serve/%.o: MT_CFLAGS += $(MHD_CFLAGS)
$(B)/bin/mt-serve: LDLIBS += $(MHD_LIBS)

# libmt.a: the host library (libcommon/<sub>/*.c) and the kernel library's dispatch and cpu backend.
LIB_SRC  := $(sort $(wildcard libcommon/*/*.c) $(wildcard kernels/*.c) $(wildcard kernels/cpu/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(B)/obj/%.o)
LIB      := $(B)/libmt.a
CMD_SRC  := $(sort $(wildcard cmd/mt-*.c))
PROGS    := $(CMD_SRC:cmd/%.c=$(B)/bin/%)
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
TESTS    := $(TEST_SRC:tests/unit/%.c=$(B)/tests/%)
MAN1     := $(sort $(wildcard man/*.1))
MAN5     := $(sort $(wildcard man/*.5))
MAN7     := $(sort $(wildcard man/*.7))

.PHONY: all check demo deps depcheck install uninstall bench clean tests soak kill-soak asan print-ldlibs mutants durations
# Plain make installs nothing: every compilation waits for depcheck, which names the Debian packages the
# build lacks and the command that installs them (make deps). One make builds everything, so parallel
# goals (make -j2 all tests) share one libmt.a.
all: $(PROGS)
depcheck:
	@share/install-deps.sh --check

# kernels/ builds on its own: its objects are compiled without libcommon on the include path.
$(B)/obj/kernels/%.o: MT_CFLAGS := $(filter-out -Ilibcommon,$(MT_CFLAGS))
# The cpu kernels' loops must vectorize: branch-free selects need -fno-trapping-math (results unchanged); the
# cost model flag is gcc's (clang builds build-fuzz).
$(B)/obj/kernels/cpu/%.o: MT_CFLAGS += -fno-trapping-math -fno-math-errno -ftree-vectorize \
    $(if $(findstring clang,$(CC)),,-fvect-cost-model=dynamic)

$(B)/obj/%.o: %.c | depcheck
	@mkdir -p $(dir $@)
	$(CC) $(MT_CFLAGS) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/bin/%: $(B)/obj/cmd/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(B)/tests/%: $(B)/obj/tests/unit/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# The NCCL communicator (libcommon/comm/comm_nccl.c) is compiled into libmt.a with MT_HAVE_NCCL, and the
# programs link libnccl and libcudart, when the CUDA toolkit has nccl.h. Neither library needs the driver
# to load: without a GPU the programs start and run on the cpu backend. tests/gpu/test_nccl.c runs on
# GPU machines (it says how).
CUDA    ?= /usr/local/cuda
ifneq ($(wildcard $(CUDA)/include/nccl.h),)
NCCL_TEST := $(B)/gpu/test_nccl
$(B)/obj/libcommon/comm/comm_nccl.o: MT_CFLAGS += -DMT_HAVE_NCCL -I$(CUDA)/include
LDLIBS  += -L$(CUDA)/lib64 -Wl,-rpath,$(CUDA)/lib64 -lnccl -lcudart
endif
$(B)/gpu/test_nccl: tests/gpu/test_nccl.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -MMD -MP,$(MT_CFLAGS)) $(CFLAGS) -I$(CUDA)/include -o $@ tests/gpu/test_nccl.c $(LIB) $(LDLIBS)

tests: $(PROGS) $(TESTS) $(NCCL_TEST)

# ---- CUDA backend and SIMT simulator (kernels/cuda/*.cu, kernels/sim; kernels/README.md) ----
# The same .cu sources build the "sim" backend (g++ with kernels/sim/simt_sim.h force-included; needs
# only the CUDA headers) and, when nvcc exists, the "cuda" backend for sm_80 and sm_90, linked against
# cuBLASLt (and cuBLAS for its grouped products). Both go into libmt.a; mtk.c registers what was built
# (MTK_HAVE_SIM, MTK_HAVE_CUDA). g++ does not know `#pragma unroll`: -Wno-unknown-pragmas.
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CXX       ?= g++
CU_SRC    := $(sort $(wildcard kernels/cuda/*.cu))
MTK_DEFS  :=
ifneq ($(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h),)
SIM_OBJ   := $(CU_SRC:%.cu=$(B)/obj/sim/%.o)
MTK_DEFS  += -DMTK_HAVE_SIM
LDLIBS    += -lstdc++
endif
ifneq ($(NVCC),)
CUDA_OBJ  := $(CU_SRC:%.cu=$(B)/obj/cuda/%.o)
MTK_DEFS  += -DMTK_HAVE_CUDA
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcublasLt -lcudart
tests: $(B)/gpu/gpu_peak
else ifeq ($(MAKELEVEL),0)
$(info make: no nvcc (CUDA_HOME=$(CUDA_HOME)): building without the CUDA backend)
endif
SIM_CXXFLAGS := -std=c++20 -D_GNU_SOURCE -Wall -Wextra -Wno-unknown-pragmas -pthread -x c++ \
                -include kernels/sim/simt_sim.h -I$(CUDA_HOME)/include -Ikernels \
                $(shell pkg-config --cflags openblas 2>/dev/null) -MMD -MP
NVCC_FLAGS   := -std=c++20 -O2 -g -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -Xcompiler -Wall,-Wextra -Ikernels -MMD -MP
$(LIB): $(SIM_OBJ) $(CUDA_OBJ)
# mtk.o is rebuilt when the set of backends changes.
MTK_STAMP := $(B)/obj/kernels/backends
$(shell mkdir -p $(B)/obj/kernels; echo '$(MTK_DEFS)' | cmp -s - $(MTK_STAMP) || echo '$(MTK_DEFS)' > $(MTK_STAMP))
$(B)/obj/kernels/mtk.o: MT_CFLAGS += $(MTK_DEFS)
$(B)/obj/kernels/mtk.o: $(MTK_STAMP)
$(B)/obj/sim/%.o: %.cu
	@mkdir -p $(dir $@)
	$(CXX) $(SIM_CXXFLAGS) $(CFLAGS) -c $< -o $@
$(B)/obj/cuda/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
# bench/gpu's measure of the device's bf16 GEMM rate (the denominator of its MFU).
$(B)/gpu/gpu_peak: bench/gpu_peak.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -MMD -MP,$(MT_CFLAGS)) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)
# The simulator's own tests (tests/sim): a self-test program (warp-op semantics, planted races and
# out-of-bounds reads), and test_kernels linked with only the kernel library; make check also builds
# both under ThreadSanitizer (build-tsan) and AddressSanitizer (build-asan-sim) for
# tests/pipeline/sim-sanitizers.sh.
KLIB_OBJ := $(filter $(B)/obj/kernels/%,$(LIB_OBJ)) $(SIM_OBJ)
$(B)/sim/simt_selftest: tests/sim/selftest.cu kernels/sim/simt_sim.h
	@mkdir -p $(dir $@)
	$(CXX) $(SIM_CXXFLAGS) $(CFLAGS) -o $@ $< -lstdc++ -lm -pthread
$(B)/sim/test_kernels: $(B)/obj/tests/unit/test_kernels.o $(KLIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
.PHONY: sim-tests sim-san
ifneq ($(SIM_OBJ),)
tests: sim-tests
sim-tests: $(B)/sim/simt_selftest
ifeq ($(B),build)
	@$(MAKE) --no-print-directory sim-san
endif
endif
sim-san:
	@$(MAKE) -s --no-print-directory NVCC= B=build-tsan OPT=-O1 CFLAGS='-O1 -g -fsanitize=thread' build-tsan/sim/test_kernels build-tsan/sim/simt_selftest
	@$(MAKE) -s --no-print-directory NVCC= B=build-asan-sim CFLAGS='-O1 -g -fsanitize=address -fno-omit-frame-pointer' build-asan-sim/sim/test_kernels build-asan-sim/sim/simt_selftest
# ---- end of the CUDA block ----

check: deps
	@$(MAKE) --no-print-directory tests
	@MAKEFLAGS= tests/run

# tests/durations (the order of a fresh checkout's test run, longest first) from the last full run's times
durations:
	@{ sed -n '/^#/p' tests/durations; for f in $(B)/test-logs/*.time; do \
	    printf '%s %s\n' "$$(cat "$$f")" "$$(basename "$$f" .time)"; done | sort -k1,1nr; } >tests/durations.tmp
	@mv tests/durations.tmp tests/durations

# ---- the programs without the CUDA backends (tests/pipeline/valgrind.sh: memcheck reads the symbols of
# every library a program links when it starts it, and cuBLAS, cuBLASLt and NCCL are over 0.6 GB). They are
# build/'s objects but two: mtk.o without the backends' defines and comm_nccl.o without NCCL (the only
# sources that look at MTK_HAVE_* and MT_HAVE_NCCL), linked with no CUDA library. Nothing else is compiled
# again.
VG_OBJ   := $(B)/obj/vg/kernels/mtk.o $(B)/obj/vg/libcommon/comm/comm_nccl.o \
            $(filter-out $(B)/obj/kernels/mtk.o $(B)/obj/libcommon/comm/comm_nccl.o,$(LIB_OBJ))
VG_PROGS := $(B)/vg/bin/mt-train $(B)/vg/bin/mt-eval $(B)/vg/bin/mt-generate $(B)/vg/bin/mt-serve
$(B)/vg/bin/mt-serve: HOST_LDLIBS += $(MHD_LIBS)
$(B)/obj/vg/kernels/mtk.o: kernels/mtk.c | depcheck
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -Ilibcommon,$(MT_CFLAGS)) $(CFLAGS) -c $< -o $@
$(B)/obj/vg/libcommon/comm/comm_nccl.o: libcommon/comm/comm_nccl.c | depcheck
	@mkdir -p $(dir $@)
	$(CC) $(MT_CFLAGS) $(CFLAGS) -c $< -o $@
$(B)/vg/libmt.a: $(VG_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^
$(B)/vg/bin/%: $(B)/obj/cmd/%.o $(B)/vg/libmt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(B)/vg/libmt.a $(HOST_LDLIBS)
ifeq ($(B),build)
tests: $(VG_PROGS)
endif

# ---- fuzzing (fuzz/README.md): one libFuzzer target per parser of outside input, built with clang under
# AddressSanitizer and UBSan into build-fuzz/ (the library without the CUDA backends). make check builds
# them and runs each for a few seconds (tests/pipeline/fuzz.sh); make fuzz runs each FUZZ_SECONDS
# (default 300) from its committed corpus and adds what it finds to build-fuzz/corpus/.
FUZZ_SRC    := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ        := $(FUZZ_SRC:fuzz/%.c=$(B)/fuzz/%)
FUZZ_CFLAGS := -O1 -g -Wno-pass-failed -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_SECONDS ?= 300
.PHONY: fuzz fuzz-build fuzz-targets
$(B)/fuzz/%: $(B)/obj/fuzz/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(LIB) $(LDLIBS)
fuzz-targets: $(FUZZ)
fuzz-build:
	@$(MAKE) -s --no-print-directory B=build-fuzz CC=clang NVCC= CUDA=/nonexistent CUDA_HOME=/nonexistent \
	    CFLAGS='$(FUZZ_CFLAGS)' fuzz-targets
ifneq ($(shell command -v clang 2>/dev/null),)
ifeq ($(B),build)
tests: fuzz-build
endif
endif
fuzz: deps fuzz-build
	@fuzz/run $(FUZZ_SECONDS)

# Every test against an AddressSanitizer + UBSan build (build-asan/); leaks fail too.
asan: deps
	@$(MAKE) --no-print-directory B=build-asan CFLAGS='-O1 -g -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer' tests
	@MAKEFLAGS= MT_BUILD=build-asan ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 tests/run

soak: deps
	@$(MAKE) --no-print-directory tests
	@MAKEFLAGS= MT_SOAK=1 tests/run

KILL_ROUNDS ?= 200
kill-soak: deps
	@$(MAKE) --no-print-directory tests
	@MAKEFLAGS= KILL_ROUNDS=$(KILL_ROUNDS) tests/run kill.sh

demo: deps
	@$(MAKE) --no-print-directory $(PROGS)
	@MAKEFLAGS= share/demo.sh

# The Debian packages (and, without a CUDA toolkit, the CUDA headers the simulator needs), then the tests'
# Python environments from PyPI (build/venv: tiktoken, tokenizers, tensorboard, bpe-openai; build/venv-hf:
# transformers; build/venv-serve: openai, prometheus_client); offline, those tests say why they skip.
deps:
	@share/install-deps.sh
	@tests/oracle/venv.sh >/dev/null || true
	@tests/oracle/venv-hf.sh >/dev/null || true
	@tests/oracle/venv-serve.sh >/dev/null || true

# Plants each small bug of tests/mutants/list in a scratch copy, one at a time, runs the tests named for
# it and prints which killed it (not part of make check; MUTANTS="ID ..." picks some).
mutants: deps
	@$(MAKE) --no-print-directory $(PROGS) $(TESTS)
	@MAKEFLAGS= tests/mutants/run $(MUTANTS)

bench: $(PROGS)
	@for b in bench/*; do [ -x "$$b" ] && MAKEFLAGS= "$$b"; done

install: $(PROGS)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/mt/gpt2 \
	           $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin
	install -m 644 share/gpt2/* $(DESTDIR)$(PREFIX)/share/mt/gpt2
	$(if $(MAN1),install -m 644 $(MAN1) $(DESTDIR)$(PREFIX)/share/man/man1)
	$(if $(MAN5),install -m 644 $(MAN5) $(DESTDIR)$(PREFIX)/share/man/man5)
	$(if $(MAN7),install -m 644 $(MAN7) $(DESTDIR)$(PREFIX)/share/man/man7)

# Removes what install put in place, and nothing else.
uninstall:
	rm -f $(PROGS:$(B)/bin/%=$(DESTDIR)$(PREFIX)/bin/%)
	rm -rf $(DESTDIR)$(PREFIX)/share/mt
	rm -f $(MAN1:man/%=$(DESTDIR)$(PREFIX)/share/man/man1/%) $(MAN5:man/%=$(DESTDIR)$(PREFIX)/share/man/man5/%) \
	      $(MAN7:man/%=$(DESTDIR)$(PREFIX)/share/man/man7/%)

# The link flags of the programs, for scripts that link against build/libmt.a (bench/gpu).
print-ldlibs:
	@echo $(LDLIBS)

clean:
	rm -rf $(B) build-asan build-tsan build-asan-sim build-fuzz build-vg

.SECONDARY:
-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
