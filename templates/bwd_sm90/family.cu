// The bwd_sm90 program the engine renders and compiles for one variant: bwd_sm80's preprocess
// and convert around this family's main kernel, in one cubin launched in order on one stream:
// flashjit_bwd_preprocess, flashjit_bwd_main, flashjit_bwd_convert. The main kernel adds dQ in
// the order convert reads (bwd_sm80/dq_store.cuh), so both run unchanged.
#include "bwd_sm90/config.cuh"
#include "bwd_sm80/preprocess.cu"
#include "bwd_sm90/backward.cu"
#include "bwd_sm80/convert.cu"
