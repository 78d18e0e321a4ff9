// The bwd_sm80 program the engine renders and compiles for one variant: its three entry points
// in one cubin (one cache entry, one module load), launched in order on one stream:
// flashjit_bwd_preprocess, flashjit_bwd_main, flashjit_bwd_convert.
#include "bwd_sm80/preprocess.cu"
#include "bwd_sm80/backward.cu"
#include "bwd_sm80/convert.cu"
