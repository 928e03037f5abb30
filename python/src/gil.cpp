// voxpipe_outermost_call (gil.hpp): fn(arg) from a frame whose unwind information says it has no
// caller (DWARF: the return address is undefined, as in glibc's clone and start_thread). An
// unwinder that reaches it stops there: pthread_exit's forced unwinding, started by CPython in
// fn when it ends a thread at interpreter exit, then ends the thread from here and never walks
// the C++ frames above. No library offers such a frame; it is a dozen instructions.
#include "gil.hpp"

#if defined(__x86_64__) && defined(__linux__)
asm(R"(
    .text
    .globl voxpipe_outermost_call
    .hidden voxpipe_outermost_call
    .type voxpipe_outermost_call, @function
    .p2align 4
voxpipe_outermost_call:
    .cfi_startproc
    endbr64
    pushq %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    .cfi_undefined %rip
    movq %rdi, %rax
    movq %rsi, %rdi
    callq *%rax
    popq %rbp
    .cfi_def_cfa %rsp, 8
    retq
    .cfi_endproc
    .size voxpipe_outermost_call, .-voxpipe_outermost_call
)");
#else
// Elsewhere a plain call: the forced unwinding then walks our frames as before this file.
extern "C" void voxpipe_outermost_call(void (*fn)(void*), void* arg) noexcept { fn(arg); }
#endif
