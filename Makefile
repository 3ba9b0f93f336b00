# Makefile: the whole mt build, non-recursive, out of tree into build/.
#   make            programs and library          make check     all tests (the README's test command)
#   make demo       build + run the pipeline on a corpus that needs no download
#   make deps       install the Debian packages   make install PREFIX=/usr/local
#   make bench      side-by-side benchmarks (bench/)    make asan      all tests under ASan/UBSan
#   make soak       long randomized runs (MT_SOAK=1)
# Sources are found by wildcard: a new libcommon/<sub>/*.c, kernels/cpu/*.c, cmd/mt-*.c or tests/unit/test_*.c
# needs no edit here.

PREFIX  ?= /usr/local
B       := build
CC      ?= cc
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
MT_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -pthread -fopenmp -Ilibcommon -Ikernels -MMD -MP \
             $(shell pkg-config --cflags libzstd jansson openblas 2>/dev/null)
LDLIBS  := $(shell pkg-config --libs libzstd jansson openblas 2>/dev/null || echo -lzstd -ljansson -lopenblas) \
           -ldnnl -lm -pthread -fopenmp

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

.PHONY: all check demo deps install uninstall bench clean tests soak asan
all: deps
	@$(MAKE) --no-print-directory $(PROGS)

# kernels/ builds on its own: its objects are compiled without libcommon on the include path.
$(B)/obj/kernels/%.o: MT_CFLAGS := $(filter-out -Ilibcommon,$(MT_CFLAGS))
# The cpu kernels' loops must vectorize: branch-free selects need -fno-trapping-math (results unchanged).
$(B)/obj/kernels/cpu/%.o: MT_CFLAGS += -fno-trapping-math -fno-math-errno -ftree-vectorize -fvect-cost-model=dynamic

$(B)/obj/%.o: %.c
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

tests: $(PROGS) $(TESTS)

check: deps
	@$(MAKE) --no-print-directory tests
	@tests/run

# Every test against an AddressSanitizer + UBSan build (build-asan/); leaks fail too.
asan: deps
	@$(MAKE) --no-print-directory B=build-asan CFLAGS='-O1 -g -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer' tests
	@MT_BUILD=build-asan ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 tests/run

soak: deps
	@$(MAKE) --no-print-directory tests
	@MT_SOAK=1 tests/run

demo: deps
	@$(MAKE) --no-print-directory $(PROGS)
	@share/demo.sh

deps:
	@share/install-deps.sh

bench: $(PROGS)
	@for b in bench/*; do [ -x "$$b" ] && "$$b"; done

install: $(PROGS)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/mt/gpt2 \
	           $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin
	install -m 644 share/gpt2/* $(DESTDIR)$(PREFIX)/share/mt/gpt2
	$(if $(MAN1),install -m 644 $(MAN1) $(DESTDIR)$(PREFIX)/share/man/man1)
	$(if $(MAN5),install -m 644 $(MAN5) $(DESTDIR)$(PREFIX)/share/man/man5)
	$(if $(MAN7),install -m 644 $(MAN7) $(DESTDIR)$(PREFIX)/share/man/man7)

uninstall:
	rm -f $(PROGS:$(B)/bin/%=$(DESTDIR)$(PREFIX)/bin/%)
	rm -rf $(DESTDIR)$(PREFIX)/share/mt

clean:
	rm -rf $(B) build-asan

.SECONDARY:
-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
