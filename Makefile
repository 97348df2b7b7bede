# Makefile: builds libcoconet.a, the coconet command and the tests.
# Warnings are errors; gcc or clang (CC=clang). The CPU tool never needs
# CUDA: the CUDA runtime build/libcoconet_cuda.so (rt/) is added only when
# nvcc is found, and the MPI bootstrap (src/cuda/cuda_mpi.c) only when mpicc is.
# Sources are in layers, src/core, front, sched, cpu, then src/api*.c, then
# src/gen (code generation), src/cuda (build and run), src/tune and
# src/main.c; objects go to build/ under the same folders.
CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
           -Wno-unused-parameter -ffp-contract=off -pthread \
           -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc -fPIC
LDLIBS  += -lm -pthread -ldl
# QUIET=1: a line per step ("CC src/x.c") instead of its command; a
# failing step still shows the compiler's messages
ifeq ($(QUIET),1)
Q    := @
say   = echo "  $(1)" &&
endif

SRC     := $(sort $(filter-out src/main.c,$(wildcard src/*.c src/*/*.c)))
OBJ     := $(SRC:src/%.c=build/%.o)
HDR     := $(wildcard src/*.h src/*/*.h) src/ops.def include/coconet.h include/coconet_rt.h include/coconet_cuda.h
UNIT    := $(patsubst tests/unit/%.c,build/tests/%,$(wildcard tests/unit/*.c))

# ---- CUDA: the toolkit, and the NCCL the runtime and generated code use ----
# NCCL: NCCL_HOME, else the first of CUDA_HOME, /usr/local, /usr with
# include/nccl.h (the order nvcc searches); its library next to it. The choice
# is written to build/cuda.conf, which the launcher reads to build generated
# code against the same NCCL (see doc/gpu.md, "Which NCCL").
# RT_BUILD: the folder of the runtime, its objects and cuda.conf (build;
# python/setup.py builds one against PyTorch's NCCL in build/python-rt).
CUDA_HOME ?= /usr/local/cuda
RT_BUILD  ?= build
NVCC      ?= $(shell command -v nvcc 2>/dev/null || ls $(CUDA_HOME)/bin/nvcc 2>/dev/null)
ifneq ($(NVCC),)
CUDA_LIB  ?= $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
NCCL_HOME ?= $(firstword $(foreach d,$(CUDA_HOME) /usr/local /usr,$(if $(wildcard $(d)/include/nccl.h),$(d))))
NCCL_LIB  ?= $(firstword $(foreach d,lib64 lib lib/x86_64-linux-gnu,$(if $(wildcard $(NCCL_HOME)/$(d)/libnccl.so*),$(NCCL_HOME)/$(d))))
NCCL_LINK ?= $(if $(wildcard $(NCCL_LIB)/libnccl.so),-lnccl,-l:libnccl.so.2)
# /usr/include must not be named: it would break #include_next in system headers
NCCL_ISYS := $(addprefix -isystem ,$(filter-out /usr/include /usr/local/include $(CUDA_HOME)/include,$(NCCL_HOME)/include))
ifneq ($(NCCL_LIB),)
CUDA_RT   := $(RT_BUILD)/libcoconet_cuda.so $(RT_BUILD)/cuda.conf
else
$(info nvcc found but no NCCL (include/nccl.h and its library): the CUDA runtime is not built; set NCCL_HOME)
endif
endif

# ---- MPI: `mpirun -np P coconet run ...` when mpicc is found ----
MPICC     ?= $(shell command -v mpicc 2>/dev/null)
LINK      := $(CC)
ifneq ($(MPICC),)
LINK      := $(MPICC)
build/cuda/cuda_mpi.o: CC := $(MPICC)
build/cuda/cuda_mpi.o: CFLAGS += -DCOCO_HAVE_MPI
endif

all: coconet build/libcoconet.so $(CUDA_RT)

coconet: build/main.o build/libcoconet.a
	$(Q)$(call say,LD $@)$(LINK) $(CFLAGS) -o $@ $^ $(LDLIBS)

build/libcoconet.a: $(OBJ)
	$(Q)$(call say,AR $@)rm -f $@ && ar rcs $@ $^

# The same library shared, for the Python package (python/coconet, ctypes).
build/libcoconet.so: $(OBJ)
	$(LINK) -shared -o $@ $^ $(LDLIBS)

build/%.o: src/%.c $(HDR) build/cflags.conf | build
	@mkdir -p $(dir $@)
	$(Q)$(call say,CC $<)$(CC) $(CFLAGS) -c -o $@ $<

build/cuda/cuda_mpi.o: build/mpi.conf

# Rebuilt only when the compiler or its flags change (objects then follow).
build/cflags.conf: FORCE | build
	@echo 'CC=$(CC) CFLAGS=$(CFLAGS)' >$@.tmp && (cmp -s $@.tmp $@ && rm $@.tmp || mv $@.tmp $@)

# Rebuilt only when the MPI compiler changes.
build/mpi.conf: FORCE | build
	@echo 'MPICC=$(MPICC)' >$@.tmp && (cmp -s $@.tmp $@ && rm $@.tmp || mv $@.tmp $@)

build/tests/%: tests/unit/%.c tests/unit/unit_check.h build/libcoconet.a $(HDR) | build
	@mkdir -p build/tests
	$(LINK) $(CFLAGS) -o $@ $< build/libcoconet.a $(LDLIBS)

# The GPU runtime: plain C against the CUDA, NCCL and cuBLASLt headers;
# its objects depend on cuda.conf, so another NCCL rebuilds them; NCCL_HOME's
# headers come before those CUDA_HOME may hold.
RT_OBJ := $(patsubst %,$(RT_BUILD)/rt/%.o,wait cuda_child slab held run limits breakdown session)
$(RT_BUILD)/rt/%.o: rt/%.c rt/rt_internal.h rt/kernels/coco_check.cuh include/coconet_rt.h \
              include/coconet_cuda.h include/coconet_session.h $(RT_BUILD)/cuda.conf | build
	@mkdir -p $(RT_BUILD)/rt
	$(CC) $(CFLAGS) -fPIC $(NCCL_ISYS) -isystem $(CUDA_HOME)/include -c -o $@ $<

$(RT_BUILD)/libcoconet_cuda.so: $(RT_OBJ)
	$(CC) -shared -o $@ $(RT_OBJ) -L$(NCCL_LIB) -Wl,-rpath,$(NCCL_LIB) -L$(CUDA_LIB) \
	    -Wl,-rpath,$(CUDA_LIB) $(NCCL_LINK) -lcublasLt -lcudart -ldl

$(RT_BUILD)/cuda.conf: FORCE | build
	@mkdir -p $(RT_BUILD)
	@printf 'NVCC=%s\nCUDA_LIB=%s\nNCCL_INCLUDE=%s\nNCCL_LIB=%s\nNCCL_LINK=%s\n' \
	    '$(NVCC)' '$(CUDA_LIB)' '$(NCCL_HOME)/include' '$(NCCL_LIB)' '$(NCCL_LINK)' >$@.tmp
	@cmp -s $@.tmp $@ && rm $@.tmp || mv $@.tmp $@

# A stand-in runtime without CUDA, for the launcher's tests on machines
# without a GPU (tests/unit/test_cuda_launch.c).
build/fake/libfake_rt.so: tests/gpu/fake_rt.c include/coconet_rt.h include/coconet_cuda.h \
                          include/coconet_session.h | build
	@mkdir -p build/fake
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $< -ldl

build:
	$(Q)mkdir -p build

# The command built again with AddressSanitizer and UBSan, for the tests
# (without MPI: tests never start MPI), an object a source (make -j).
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -Wno-format-truncation
ASAN_OBJ   := $(SRC:src/%.c=build/asan/%.o) build/asan/main.o
build/asan/%.o: src/%.c $(HDR) | build
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -O2,$(CFLAGS)) $(ASAN_FLAGS) -c -o $@ $<

build/asan/coconet: $(ASAN_OBJ)
	$(CC) $(filter-out -O2,$(CFLAGS)) $(ASAN_FLAGS) -o $@ $(ASAN_OBJ) $(LDLIBS) -ldl

# The libFuzzer harness over the public API (tests/fuzz/fuzz_api.c), with
# AddressSanitizer and UBSan; built by `make test` when clang has libFuzzer
# (tests/fuzz/has_libfuzzer.sh), else the fuzz-api group is skipped.
CLANG      ?= $(shell command -v clang 2>/dev/null)
FUZZ_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all \
              -fno-omit-frame-pointer -Wno-string-concatenation
FUZZ_OBJ   := $(SRC:src/%.c=build/fuzz/%.o)
build/fuzz/%.o: src/%.c $(HDR) | build
	@mkdir -p $(dir $@)
	$(CLANG) $(filter-out -O2,$(CFLAGS)) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

build/fuzz/fuzz_api: tests/fuzz/fuzz_api.c $(FUZZ_OBJ) $(HDR) | build
	$(CLANG) $(filter-out -O2,$(CFLAGS)) $(FUZZ_FLAGS) -fsanitize=fuzzer -o $@ tests/fuzz/fuzz_api.c \
	    $(FUZZ_OBJ) $(LDLIBS)

fuzz-api:
	@if sh tests/fuzz/has_libfuzzer.sh "$(CLANG)"; then \
	    $(MAKE) --no-print-directory build/fuzz/fuzz_api; \
	else echo "note: no clang with libFuzzer: the fuzz-api tests will be skipped"; fi

# make test: what the tests need, built a job a core (JOBS), then the suite
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test-build: coconet build/libcoconet.so $(UNIT) $(CUDA_RT) build/fake/libfake_rt.so \
            build/asan/coconet fuzz-api

test:
	@$(MAKE) --no-print-directory -j$(JOBS) test-build
	@sh tests/run.sh

# The main job: every example (RUN_FILES) on the CPU backend with 4
# simulated ranks, each of its schedules checked against the program; the
# command built first on every core (JOBS), a line a file; each block
# headed by its file, and one line at the end counting those that failed.
RUN_FILES ?= $(wildcard examples/*.coco)
run:
	@$(MAKE) --no-print-directory -j$(JOBS) QUIET=1 coconet
	@n=0; failed=; \
	for f in $(RUN_FILES); do \
	    echo "== $$f"; n=$$((n + 1)); \
	    ./coconet run $$f --ranks 4 --backend cpu || failed="$$failed $$f"; echo; \
	done; \
	echo "make run: $$n examples ran, $$(echo $$failed | wc -w) failed$${failed:+:$$failed}"; \
	[ -z "$$failed" ]

# On a machine with GPUs: every example x every schedule x P in 1, 2 and 4, at
# the examples' sizes and the paper's, checked against the CPU reference;
# the table goes to $(OUT).
OUT ?= build/gpu-results.md
test-gpu: coconet $(CUDA_RT)
	@sh tests/gpu/run.sh $(OUT)

clean:
	rm -rf build coconet

.PHONY: all test test-build test-gpu run clean fuzz-api FORCE
