//! The activation kernels as hand-written PTX: `y = max(y + bias[col], 0)` in place, one
//! entry point per dtype.
//!
//! PTX text is loaded with `cuModuleLoadData` and JIT-compiled by the driver, so no NVRTC
//! or toolkit is needed at run time. `.version 7.0` / `.target sm_70` keep it loadable by
//! every driver since CUDA 11.0 on Volta and newer GPUs (a driver JITs PTX forward to
//! newer architectures, e.g. sm_90 for H100/H200). bfloat16 is converted with integer
//! operations (shift to f32; round-to-nearest-even back), which needs no sm_80
//! instruction. Each kernel uses a grid-stride loop over 64-bit indices, so one launch
//! with a capped grid covers any tensor size. Checked with `ptxas` for sm_70 and sm_90
//! (see `tests/gpu/README.md`).

/// Entry point names, in the order f32, f16, bf16.
pub const KERNELS: [&str; 3] = ["bias_relu_f32", "bias_relu_f16", "bias_relu_bf16"];

/// Threads per block for every launch.
pub const BLOCK: u32 = 256;
/// Largest grid launched; the grid-stride loop covers the rest.
pub const MAX_GRID: u32 = 65_535 * 8;

/// The module text. Parameters of every kernel: `y` (u64 device pointer), `bias` (u64
/// device pointer), `total` (u64 elements of `y`), `width` (u64 elements per row).
pub const SOURCE: &str = r#"//
// gpumem-agent activation kernels (hand-written PTX).
//
.version 7.0
.target sm_70
.address_size 64

.visible .entry bias_relu_f32(
	.param .u64 y_ptr,
	.param .u64 b_ptr,
	.param .u64 total,
	.param .u64 width
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<5>;
	.reg .b64 	%rd<11>;
	.reg .f32 	%f<3>;

	ld.param.u64 	%rd1, [y_ptr];
	ld.param.u64 	%rd2, [b_ptr];
	ld.param.u64 	%rd3, [total];
	ld.param.u64 	%rd4, [width];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mov.u32 	%r4, %nctaid.x;
	mul.wide.u32 	%rd5, %r1, %r2;
	cvt.u64.u32 	%rd6, %r3;
	add.u64 	%rd5, %rd5, %rd6;
	mul.wide.u32 	%rd7, %r4, %r2;
$F32_LOOP:
	setp.ge.u64 	%p1, %rd5, %rd3;
	@%p1 bra 	$F32_DONE;
	rem.u64 	%rd8, %rd5, %rd4;
	shl.b64 	%rd9, %rd5, 2;
	add.u64 	%rd9, %rd1, %rd9;
	shl.b64 	%rd10, %rd8, 2;
	add.u64 	%rd10, %rd2, %rd10;
	ld.global.f32 	%f1, [%rd9];
	ld.global.f32 	%f2, [%rd10];
	add.f32 	%f1, %f1, %f2;
	max.f32 	%f1, %f1, 0f00000000;
	st.global.f32 	[%rd9], %f1;
	add.u64 	%rd5, %rd5, %rd7;
	bra.uni 	$F32_LOOP;
$F32_DONE:
	ret;
}

.visible .entry bias_relu_f16(
	.param .u64 y_ptr,
	.param .u64 b_ptr,
	.param .u64 total,
	.param .u64 width
)
{
	.reg .pred 	%p<2>;
	.reg .b16 	%rs<3>;
	.reg .b32 	%r<5>;
	.reg .b64 	%rd<11>;
	.reg .f32 	%f<3>;

	ld.param.u64 	%rd1, [y_ptr];
	ld.param.u64 	%rd2, [b_ptr];
	ld.param.u64 	%rd3, [total];
	ld.param.u64 	%rd4, [width];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mov.u32 	%r4, %nctaid.x;
	mul.wide.u32 	%rd5, %r1, %r2;
	cvt.u64.u32 	%rd6, %r3;
	add.u64 	%rd5, %rd5, %rd6;
	mul.wide.u32 	%rd7, %r4, %r2;
$F16_LOOP:
	setp.ge.u64 	%p1, %rd5, %rd3;
	@%p1 bra 	$F16_DONE;
	rem.u64 	%rd8, %rd5, %rd4;
	shl.b64 	%rd9, %rd5, 1;
	add.u64 	%rd9, %rd1, %rd9;
	shl.b64 	%rd10, %rd8, 1;
	add.u64 	%rd10, %rd2, %rd10;
	ld.global.b16 	%rs1, [%rd9];
	ld.global.b16 	%rs2, [%rd10];
	cvt.f32.f16 	%f1, %rs1;
	cvt.f32.f16 	%f2, %rs2;
	add.f32 	%f1, %f1, %f2;
	max.f32 	%f1, %f1, 0f00000000;
	cvt.rn.f16.f32 	%rs1, %f1;
	st.global.b16 	[%rd9], %rs1;
	add.u64 	%rd5, %rd5, %rd7;
	bra.uni 	$F16_LOOP;
$F16_DONE:
	ret;
}

.visible .entry bias_relu_bf16(
	.param .u64 y_ptr,
	.param .u64 b_ptr,
	.param .u64 total,
	.param .u64 width
)
{
	.reg .pred 	%p<2>;
	.reg .b16 	%rs<3>;
	.reg .b32 	%r<9>;
	.reg .b64 	%rd<11>;
	.reg .f32 	%f<3>;

	ld.param.u64 	%rd1, [y_ptr];
	ld.param.u64 	%rd2, [b_ptr];
	ld.param.u64 	%rd3, [total];
	ld.param.u64 	%rd4, [width];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mov.u32 	%r4, %nctaid.x;
	mul.wide.u32 	%rd5, %r1, %r2;
	cvt.u64.u32 	%rd6, %r3;
	add.u64 	%rd5, %rd5, %rd6;
	mul.wide.u32 	%rd7, %r4, %r2;
$BF16_LOOP:
	setp.ge.u64 	%p1, %rd5, %rd3;
	@%p1 bra 	$BF16_DONE;
	rem.u64 	%rd8, %rd5, %rd4;
	shl.b64 	%rd9, %rd5, 1;
	add.u64 	%rd9, %rd1, %rd9;
	shl.b64 	%rd10, %rd8, 1;
	add.u64 	%rd10, %rd2, %rd10;
	ld.global.b16 	%rs1, [%rd9];
	ld.global.b16 	%rs2, [%rd10];
	cvt.u32.u16 	%r5, %rs1;
	shl.b32 	%r5, %r5, 16;
	mov.b32 	%f1, %r5;
	cvt.u32.u16 	%r6, %rs2;
	shl.b32 	%r6, %r6, 16;
	mov.b32 	%f2, %r6;
	add.f32 	%f1, %f1, %f2;
	max.f32 	%f1, %f1, 0f00000000;
	// Round to nearest even: add 0x7fff plus the lowest kept bit, keep the top half.
	mov.b32 	%r5, %f1;
	shr.u32 	%r7, %r5, 16;
	and.b32 	%r7, %r7, 1;
	add.u32 	%r5, %r5, 32767;
	add.u32 	%r5, %r5, %r7;
	shr.u32 	%r5, %r5, 16;
	cvt.u16.u32 	%rs1, %r5;
	st.global.b16 	[%rd9], %rs1;
	add.u64 	%rd5, %rd5, %rd7;
	bra.uni 	$BF16_LOOP;
$BF16_DONE:
	ret;
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_text_is_loadable_by_driver_580_and_names_every_kernel() {
        // Driver 580 (CUDA 13.0) reads PTX ISA up to 9.0; keep well below it.
        assert!(SOURCE.contains(".version 7.0\n"));
        assert!(SOURCE.contains(".target sm_70\n"));
        assert!(SOURCE.contains(".address_size 64\n"));
        for k in KERNELS {
            assert!(SOURCE.contains(&format!(".visible .entry {k}(")), "{k}");
        }
        // `CString::new` inside cudarc's loader refuses interior NULs.
        assert!(!SOURCE.contains('\0'));
    }
}
