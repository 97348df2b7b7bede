# Makefile: builds libcoconet.a, the coconet command and the tests.
# Warnings are errors; gcc or clang (CC=clang). CUDA parts are added only
# when nvcc is found (later issues); the CPU tool never needs it.
CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
           -Wno-unused-parameter -ffp-contract=off -pthread \
           -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc
LDLIBS  += -lm -pthread

SRC     := $(sort $(filter-out src/main.c,$(wildcard src/*.c)))
OBJ     := $(SRC:src/%.c=build/%.o)
UNIT    := $(patsubst tests/unit/%.c,build/tests/%,$(wildcard tests/unit/*.c))

all: coconet

coconet: build/main.o build/libcoconet.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

build/libcoconet.a: $(OBJ)
	rm -f $@ && ar rcs $@ $^

build/%.o: src/%.c src/coco.h include/coconet.h | build
	$(CC) $(CFLAGS) -c -o $@ $<

build/tests/%: tests/unit/%.c build/libcoconet.a src/coco.h include/coconet.h | build
	@mkdir -p build/tests
	$(CC) $(CFLAGS) -o $@ $< build/libcoconet.a $(LDLIBS)

build:
	mkdir -p build

test: coconet $(UNIT)
	@sh tests/run.sh

# The main job: every example on the CPU backend with 4 simulated ranks,
# each of its schedules checked against the program.
run: coconet
	@for f in examples/*.coco; do ./coconet run $$f --ranks 4 || exit 1; echo; done

clean:
	rm -rf build coconet

.PHONY: all test run clean
