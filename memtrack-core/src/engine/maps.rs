//! Taking a map out of the loaded eBPF object by name, with errors that name the map.
//! Shared by the loader (the counting maps) and the kernel stacks (the unwinding and
//! stack maps), which each own the maps they take.

use crate::{
    engine::object::Object,
    error::{Error, Result},
};

/// The error of an operation on map `map`.
pub(crate) fn map_err(map: &'static str) -> impl FnOnce(aya::maps::MapError) -> Error {
    move |source| Error::Map {
        map,
        source: Box::new(source),
    }
}

/// The error for map `name` missing from the object (or taken out of it already).
pub(crate) fn no_such_map(name: &'static str) -> Error {
    map_err(name)(aya::maps::MapError::InvalidName {
        name: name.to_string(),
    })
}

/// Takes map `name` out of `object` as a `T`; an error if the object has no such map
/// (or it was taken) or it is not a `T`.
pub(crate) fn take_map<T>(object: &mut Object, name: &'static str) -> Result<T>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = object.take_map(name).ok_or_else(|| no_such_map(name))?;
    T::try_from(map.map_err(map_err(name))?).map_err(map_err(name))
}

/// A map of type `T` from a descriptor of it (a second handle of a map the object keeps,
/// or one made outside the object).
pub(crate) fn map_from_fd<T>(fd: std::os::fd::OwnedFd) -> Result<T, aya::maps::MapError>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    T::try_from(aya::maps::Map::from_map_data(aya::maps::MapData::from_fd(
        fd,
    )?)?)
}
