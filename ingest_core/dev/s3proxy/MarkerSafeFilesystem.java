/*
 * jclouds' `filesystem` backend of S3Proxy, with two differences, both towards S3's own behaviour:
 * - the DELETE of a folder marker ("a/b/") while the folder still holds objects answers at once. S3 deletes only
 *   the marker object and leaves the keys under it; jclouds maps the marker to the folder itself, drops the
 *   marker's attributes (then it is no marker any more), and then tries to remove the folder ten times, a second
 *   apart (`Utils.delete`), before it gives up and answers 204. Here the attributes are dropped and the answer is
 *   the same 204, without the ten seconds: Hadoop S3A deletes a job's `_temporary` tree in listing order, parents
 *   first, so every Spark commit met such waits;
 * - a listing without a delimiter holds the folders a client made (a marker PUT, S3A's mkdirs) and not every
 *   folder that holds a key, which jclouds listed as "a/b/" objects S3 does not have.
 *
 * Compiled and loaded by ingest_core.dev.embedded_s3.EmbeddedS3 (persistent=True) beside S3Proxy's own jar, as the
 * jclouds provider "ingest-filesystem". Development tooling only.
 */
package ingest.s3proxy;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.UserDefinedFileAttributeView;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.stream.Stream;

import com.google.common.base.Supplier;
import com.google.common.collect.ImmutableSet;
import com.google.inject.AbstractModule;
import com.google.inject.Module;
import com.google.inject.util.Modules;

import jakarta.inject.Inject;
import jakarta.inject.Named;
import jakarta.inject.Provider;

import org.jclouds.blobstore.LocalStorageStrategy;
import org.jclouds.blobstore.domain.BlobBuilder;
import org.jclouds.domain.Location;
import org.jclouds.filesystem.FilesystemApiMetadata;
import org.jclouds.filesystem.config.FilesystemBlobStoreContextModule;
import org.jclouds.filesystem.predicates.validators.FilesystemBlobKeyValidator;
import org.jclouds.filesystem.predicates.validators.FilesystemContainerNameValidator;
import org.jclouds.filesystem.reference.FilesystemConstants;
import org.jclouds.filesystem.strategy.internal.FilesystemStorageStrategyImpl;

public final class MarkerSafeFilesystem extends FilesystemApiMetadata {
    public static final String ID = "ingest-filesystem";

    public MarkerSafeFilesystem() {
        this(new Builder());
    }

    private MarkerSafeFilesystem(Builder builder) {
        super(builder);
    }

    @Override
    public Builder toBuilder() {
        return (Builder) new Builder().fromApiMetadata(this);
    }

    public static final class Builder extends FilesystemApiMetadata.Builder {
        Builder() {
            id(ID).name("jclouds filesystem, a marker's DELETE without retries")
                    .defaultModules(ImmutableSet.<Class<? extends Module>>of(ContextModule.class));
        }

        @Override
        public MarkerSafeFilesystem build() {
            return new MarkerSafeFilesystem(this);
        }
    }

    /** The filesystem backend's own bindings, its storage strategy replaced. */
    public static final class ContextModule extends AbstractModule {
        @Override
        protected void configure() {
            install(Modules.override(new FilesystemBlobStoreContextModule()).with(new AbstractModule() {
                @Override
                protected void configure() {
                    bind(LocalStorageStrategy.class).to(Strategy.class);
                }
            }));
        }
    }

    public static final class Strategy extends FilesystemStorageStrategyImpl {
        private static final String MARKER_ATTRIBUTE = "user.content-md5";

        @Inject
        Strategy(Provider<BlobBuilder> blobBuilders, @Named(FilesystemConstants.PROPERTY_BASEDIR) String baseDir,
                 @Named(FilesystemConstants.PROPERTY_AUTO_DETECT_CONTENT_TYPE) boolean autoDetectContentType,
                 FilesystemContainerNameValidator containerNameValidator, FilesystemBlobKeyValidator blobKeyValidator,
                 Supplier<Location> defaultLocation) {
            super(blobBuilders, baseDir, autoDetectContentType, containerNameValidator, blobKeyValidator,
                    defaultLocation);
        }

        @Override
        public void removeBlob(String container, String key) {
            filesystemContainerNameValidator.validate(container);
            filesystemBlobKeyValidator.validate(key);
            Path folder = Paths.get(buildPathStartingFromBaseDir(container, key));
            if (Files.isDirectory(folder) && holdsAnything(folder)) {
                try {
                    UserDefinedFileAttributeView view =
                            Files.getFileAttributeView(folder, UserDefinedFileAttributeView.class);
                    if (view != null) {
                        for (String name : Set.copyOf(view.list())) {
                            view.delete(name);
                        }
                    }
                } catch (IOException e) {
                    throw new RuntimeException("could not drop the folder marker " + folder, e);
                }
                return;  // the keys under it stay, as on S3
            }
            super.removeBlob(container, key);
        }

        @Override
        public Iterable<String> getBlobKeysInsideContainer(String container, String prefix, String delimiter)
                throws IOException {
            Iterable<String> keys = super.getBlobKeysInsideContainer(container, prefix, delimiter);
            if (delimiter != null && !delimiter.isEmpty()) {
                return keys;  // folders are the common prefixes then, as on S3
            }
            List<String> objects = new ArrayList<>();
            for (String key : keys) {
                if (!key.endsWith("/") || isMarker(Paths.get(buildPathStartingFromBaseDir(container, key)))) {
                    objects.add(key);
                }
            }
            return objects;
        }

        /** A folder a client made: jclouds gives its marker the empty object's MD5, a folder it made itself none. */
        private static boolean isMarker(Path folder) {
            try {
                UserDefinedFileAttributeView view =
                        Files.getFileAttributeView(folder, UserDefinedFileAttributeView.class);
                return view != null && view.list().contains(MARKER_ATTRIBUTE);
            } catch (IOException e) {
                return false;  // gone meanwhile
            }
        }

        private static boolean holdsAnything(Path folder) {
            try (Stream<Path> entries = Files.list(folder)) {
                return entries.findAny().isPresent();
            } catch (IOException e) {
                return false;  // gone meanwhile: jclouds' own path answers
            }
        }
    }
}
