// A namespaced function template for the stacks tests (memtrack-cli/tests/stacks.rs):
// its symbol is mangled (_ZN5codec11make_bufferIiEEPT_m), and symbolization must give
// the demangled `codec::make_buffer<int>(unsigned long)`. Built -O2 -g
// -fomit-frame-pointer; noipa keeps it a real function under its own name, and the
// store after `new` keeps the call from being a tail call.
#include <cstddef>

volatile int sink;

namespace codec {
template <typename T> __attribute__((noipa)) T *make_buffer(std::size_t n) {
    T *p = new T[n]; // site: make_buffer calls operator new[]
    p[0] = T();
    sink = 1;
    return p;
}
} // namespace codec

int main() {
    int *p = codec::make_buffer<int>(10); // site: main calls make_buffer
    delete[] p;
    return 0;
}
