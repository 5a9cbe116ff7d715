//! `LAKESTREAM_FLUSS_TIERING=0` (no Fluss tiering service in the test
//! clusters) turns on the cfg `fluss_tiering_off`, under which the tests that
//! need the service are ignored, and listed as ignored with the reason, not
//! passed.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(fluss_tiering_off)");
    println!("cargo::rerun-if-env-changed=LAKESTREAM_FLUSS_TIERING");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("LAKESTREAM_FLUSS_TIERING").as_deref() == Ok("0") {
        println!("cargo::rustc-cfg=fluss_tiering_off");
    }
}
