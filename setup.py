"""ament_python set-up for vehcal_ros (works with colcon and with plain pip)."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "vehcal_ros"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*", "benchmarks"]),
    package_data={PACKAGE: ["data/*.yaml"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
        (f"share/{PACKAGE}/config/scenarios", glob("config/scenarios/*.yaml")),
        (f"share/{PACKAGE}/config/vehicles", glob("config/vehicles/*.yaml")),
        (f"share/{PACKAGE}/config/foxglove", glob("config/foxglove/*.json")),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    maintainer="vehcal_ros maintainers",
    maintainer_email="vehcal@example.com",
    description="In-vehicle grip estimation and Bayesian 8-DOF model calibration for ROS 2",
    license="BSD-3-Clause",
    tests_require=["pytest"],
    python_requires=">=3.10",
    entry_points={
        "console_scripts": [
            "vehcal = vehcal_ros.cli:main",
            "grip_estimator = vehcal_ros.nodes.grip_estimator:main",
            "model_calibrator = vehcal_ros.nodes.model_calibrator:main",
            "vehicle_simulator = vehcal_ros.nodes.vehicle_simulator:main",
        ],
    },
)
