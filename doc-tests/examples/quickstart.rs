use onnx_prepared::{Error, RuntimeSession, SessionOptions, Tensor};

fn main() -> Result<(), Error> {
    let session = RuntimeSession::open("gemm-chain.onnx", SessionOptions::default())?;
    let outputs = session.run_with([("A", Tensor::from_f32(vec![1, 256], vec![0.5; 256])?)])?;
    println!("Y: {:?}", outputs.output("Y")?.shape());
    Ok(())
}
