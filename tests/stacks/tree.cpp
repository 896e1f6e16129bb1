// A known call tree in C++ for the stacks-versus-DHAT tests
// (memtrack-cli/tests/stacks_vs_dhat.rs), built with g++ -O2 -g -fomit-frame-pointer:
//
//   main -> load -> decode -> operator new(n + 8)      10 blocks of 48 bytes, 1 kept
//   main -> load_other -> decode -> operator new(3 n)   3 blocks of 60 bytes, all freed
//
// noipa keeps decode, load and load_other real functions under their own names; the
// stores to `sink` after each call keep the calls from becoming tail calls, so every
// call leaves a return address.
#include <cstddef>
#include <new>

volatile char sink;

__attribute__((noipa)) char *decode(std::size_t n) {
    char *p = static_cast<char *>(::operator new(n)); // site: decode calls operator new
    p[0] = 1;
    sink = p[0];
    return p;
}

__attribute__((noipa)) char *load(std::size_t n) {
    char *p = decode(n + 8); // site: load calls decode
    sink = p[0];
    return p;
}

__attribute__((noipa)) char *load_other(std::size_t n) {
    char *p = decode(n * 3); // site: load_other calls decode
    sink = p[0];
    return p;
}

int main() {
    char *kept = nullptr;
    for (int i = 0; i < 10; i++) {
        char *p = load(40); // site: main calls load
        if (i == 9)
            kept = p;
        else
            ::operator delete(p);
    }
    for (int i = 0; i < 3; i++)
        ::operator delete(load_other(20)); // site: main calls load_other
    sink = kept[0];
    return 0;
}
