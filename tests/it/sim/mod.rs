//! The simulator's own behaviour, over real HTTP on loopback: its routes,
//! its faults, its streams and what real servers do that it copies.

mod faults;
mod platform;
mod real_servers;
mod streams;
