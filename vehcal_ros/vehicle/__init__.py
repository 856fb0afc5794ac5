"""The vehicle, described once: the description dataclass, its loading and validation, and what derives from it
(static loads, prior ranges, the rolling radius the slip uses). The ground floor: every other layer may import
it; it imports nothing of the package but :mod:`vehcal_ros.errors` and :mod:`vehcal_ros.resources`."""
