# gdrlab in a container: the labs in JupyterLab, live on the GPU (and HCA) the container is given.
#   docker build -t gdrlab .
#   docker run --rm -it -p 8888:8888 gdrlab                   # no GPU: recorded data and the model
#   docker run --rm -it --gpus all -p 8888:8888 gdrlab        # live GPU paths (NVIDIA Container Toolkit)
#   docker run --rm -it --gpus all --device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1 \
#       --shm-size 1g -p 8888:8888 gdrlab                     # and the RDMA HCA (verbs wire, gdr path)
# Open the URL with the token that JupyterLab prints. The learner's copies live in /labs: mount a
# volume there (-v gdrlab-labs:/labs) to keep them. No CUDA toolkit is needed in the image: the engine
# opens the driver's libcuda.so.1, which --gpus all mounts from the host.
# The class view's server is in the image too (the installed gdrlab's [class] extra):
#   docker run --rm -p 8731:8731 -v gdrlab-class:/data -e GDRLAB_TOKEN=... gdrlab \
#       gdrlab class serve --listen 0.0.0.0:8731 --db /data/class.sqlite   (docs/class-view.md)
FROM debian:bookworm-slim
# Only what builds and runs gdrlab: the lab sources with solutions (labs/, scripts/labs/) stay out.
COPY pyproject.toml CMakeLists.txt README.md constraints.txt /opt/gdrlab/
COPY native /opt/gdrlab/native
COPY gdrlab /opt/gdrlab/gdrlab
COPY scripts/install-system-deps.sh scripts/install-gdrlab.sh /opt/gdrlab/scripts/
WORKDIR /opt/gdrlab
# the same two install steps as CI: the system packages, then gdrlab at the versions that passed
RUN bash scripts/install-system-deps.sh --lab \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv \
 && bash scripts/install-gdrlab.sh --python /opt/venv/bin/python --extra lab \
 && /opt/venv/bin/python -m pip install -q -c constraints.txt "gdrlab[class]" \
 && rm -rf /root/.cache/pip /opt/gdrlab/build
ENV PATH=/opt/venv/bin:$PATH \
    GDRLAB_WORKDIR=/labs \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
VOLUME /labs
EXPOSE 8888 8731
CMD ["gdrlab", "lab", "--no-browser", "--ip=0.0.0.0", "--port=8888"]
