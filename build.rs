//! Cfgs that leave tests out, listed as ignored with the reason, never
//! passed:
//! - `LAKESTREAM_FLUSS=0` (no Fluss cluster: no Java, Maven or Maven
//!   Central) turns on `fluss_off`, under which every test that starts a
//!   Fluss cluster is ignored;
//! - `LAKESTREAM_FLUSS_TIERING=0` (no Fluss tiering service in the test
//!   clusters) turns on `fluss_tiering_off`, under which the tests that need
//!   the service are ignored.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(fluss_off)");
    println!("cargo::rustc-check-cfg=cfg(fluss_tiering_off)");
    println!("cargo::rerun-if-env-changed=LAKESTREAM_FLUSS");
    println!("cargo::rerun-if-env-changed=LAKESTREAM_FLUSS_TIERING");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("LAKESTREAM_FLUSS").as_deref() == Ok("0") {
        println!("cargo::rustc-cfg=fluss_off");
    }
    if std::env::var("LAKESTREAM_FLUSS_TIERING").as_deref() == Ok("0") {
        println!("cargo::rustc-cfg=fluss_tiering_off");
    }
}
