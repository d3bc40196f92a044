// The local stack's S3: s3rver (npm), keeping each object as files under --directory, with four fixes
// for what the service needs of it, and the CORS the web app's uploads need (5).
'use strict';

const crypto = require('crypto');
const fs = require('fs-extra');
const path = require('path');
const { Transform } = require('stream');
const { pipeline } = require('stream/promises');

const S3rver = require('s3rver');
const AWSAccount = require('s3rver/lib/models/account');
const objectController = require('s3rver/lib/controllers/object');
const FilesystemStore = require('s3rver/lib/stores/filesystem');
const { getConfigModel } = require('s3rver/lib/models/config');

const option = (name) => {
  const index = process.argv.indexOf(`--${name}`);
  if (index < 0 || index + 1 >= process.argv.length) throw new Error(`--${name} is required`);
  return process.argv[index + 1];
};

// 1. Any credentials, as moto and dynalite take them: s3rver refuses an access key id it does not know
// (it verifies no SigV4 signature, and mismatched SigV2 ones are allowed below).
const knownAccount = AWSAccount.registry.get.bind(AWSAccount.registry);
AWSAccount.registry.get = (accessKeyId) => {
  if (!knownAccount(accessKeyId)) AWSAccount.DUMMY_ACCOUNT.createKeyPair(accessKeyId, accessKeyId);
  return knownAccount(accessKeyId);
};

// 2. CopyObject finds sources whose key has '=', '+' or other reserved characters: s3rver reads the
// x-amz-copy-source header with decodeURI, which leaves them percent-encoded (the analytics mirror's
// keys, `.../import=7/part-000001.parquet`, were all "NoSuchKey").
const putObjectCopy = objectController.putObjectCopy;
objectController.putObjectCopy = (ctx) => {
  ctx.headers['x-amz-copy-source'] = encodeURI(decodeURIComponent(ctx.headers['x-amz-copy-source']));
  return putObjectCopy(ctx);
};

// 3. A written object appears whole or not at all: it goes to a temporary file renamed over the object's
// once flushed. s3rver wrote in place and answered before the file was flushed, so a GET right after a
// PUT could read part of it, and a crash mid-write left a truncated object that listings showed. The
// md5 file (the ETag) is removed before the rename and written after: one missing is recomputed from
// the object, so a crash in between never pairs an object with another version's ETag.
const partialPath = (objectPath) => `${objectPath}.${crypto.randomUUID()}.partial`;

async function replaceObject(store, bucket, key, partial, md5) {
  const objectPath = store.getResourcePath(bucket, key, 'object');
  const md5Path = store.getResourcePath(bucket, key, 'object.md5');
  await fs.remove(md5Path);
  await fs.rename(partial, objectPath);
  await fs.writeFile(md5Path, md5);
}

FilesystemStore.prototype.putObject = async function putObject(object) {
  const objectPath = this.getResourcePath(object.bucket, object.key, 'object');
  await fs.mkdirp(path.dirname(objectPath));
  const partial = partialPath(objectPath);
  const hash = crypto.createHash('md5');
  let size = 0;
  const measure = new Transform({
    transform(chunk, encoding, callback) {
      hash.update(chunk);
      size += chunk.length;
      callback(null, chunk);
    },
  });
  try {
    const content = Buffer.isBuffer(object.content) ? [object.content] : object.content;
    await pipeline(content, measure, fs.createWriteStream(partial));
    const md5 = hash.digest('hex');
    await this.putMetadata(object.bucket, object.key, object.metadata);
    await replaceObject(this, object.bucket, object.key, partial, md5);
    return { size, md5 };
  } catch (error) {
    await fs.remove(partial);
    throw error;
  }
};

const copyObject = FilesystemStore.prototype.copyObject;
FilesystemStore.prototype.copyObject = async function (srcBucket, srcKey, destBucket, destKey, replacementMetadata) {
  const source = this.getResourcePath(srcBucket, srcKey, 'object');
  const target = this.getResourcePath(destBucket, destKey, 'object');
  if (source === target) return copyObject.apply(this, arguments); // a metadata change only
  const { etag } = await this.getMetadata(srcBucket, srcKey);
  await fs.mkdirp(path.dirname(target));
  const partial = partialPath(target);
  try {
    await fs.copy(source, partial);
    const sourceMetadata = this.getResourcePath(srcBucket, srcKey, 'metadata.json');
    if (replacementMetadata) {
      await this.putMetadata(destBucket, destKey, replacementMetadata);
    } else if (await fs.pathExists(sourceMetadata)) {
      await fs.copy(sourceMetadata, this.getResourcePath(destBucket, destKey, 'metadata.json'));
    }
    await replaceObject(this, destBucket, destKey, partial, JSON.parse(etag));
  } catch (error) {
    await fs.remove(partial);
    throw error;
  }
  return this.getMetadata(destBucket, destKey);
};

// 4. ListObjectsV2 pages past the first 1,000 keys: s3rver encrypts its continuation token with DES, which
// OpenSSL 3 (Node 17 on) refuses without its legacy provider, so every listing of more than 1,000 keys
// failed. Triple DES with the key three times is DES, and OpenSSL 3 offers it by default.
const tripleForSingleDes = (make) => (algorithm, key, iv, options) => (algorithm === 'des'
  ? make('des-ede3-cbc', Buffer.concat([key, key, key]), iv, options)
  : make(algorithm, key, iv, options));
crypto.createCipheriv = tripleForSingleDes(crypto.createCipheriv);
crypto.createDecipheriv = tripleForSingleDes(crypto.createDecipheriv);

// 5. The web app's imports page PUTs a file from the browser straight to its upload URL (a presigned
// PUT), which needs CORS: a bucket with no CORS configuration of its own answers as if it had this one,
// the local counterpart of DataBucket's CorsConfiguration in infra/template.yaml. The page is served by
// the local API on the loopback, on whatever port it was given: any port of 127.0.0.1 and localhost,
// PUT only, with the Content-Type the browser sends for the file.
const LOOPBACK_CORS = getConfigModel('cors').validate(`<CORSConfiguration>
  <CORSRule>
    <AllowedOrigin>http://127.0.0.1:*</AllowedOrigin>
    <AllowedOrigin>http://localhost:*</AllowedOrigin>
    <AllowedMethod>PUT</AllowedMethod>
    <AllowedHeader>content-type</AllowedHeader>
    <MaxAgeSeconds>3600</MaxAgeSeconds>
  </CORSRule>
</CORSConfiguration>`);
const getSubresource = FilesystemStore.prototype.getSubresource;
FilesystemStore.prototype.getSubresource = async function (bucket, key, type) {
  const own = await getSubresource.call(this, bucket, key, type);
  return own || (type === 'cors' && key === undefined ? LOOPBACK_CORS : own);
};

new S3rver({
  address: option('address'),
  port: Number(option('port')),
  directory: option('directory'),
  silent: true,
  allowMismatchedSignatures: true,
  vhostBuckets: false,
}).run().catch((error) => {
  console.error(error);
  process.exit(1);
});
